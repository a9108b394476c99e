// A session's turns folded from its events, and drawn as lanes of stages (the timeline).
// The fold is for display only: the state of record is rebuilt by the server (replay.js).

import { esc, folded, html, ms, raw, short } from "./util.js";

const STAGES = [
  "RECEIVE_INPUT", "COMPOSE_REQUEST", "SEND_REQUEST", "STREAM_RESPONSE", "TOOL_CALL", "RENDER",
];
const STAGE_LABEL = {
  RECEIVE_INPUT: "receive", COMPOSE_REQUEST: "compose", SEND_REQUEST: "send",
  STREAM_RESPONSE: "stream", TOOL_CALL: "tools", RENDER: "render",
};

// kinds drawn in their turn's lane: without a turn id they become a session note
const IN_A_TURN = new Set([
  "InputAccepted", "FollowUpQueued", "SteeringInjected", "SessionTurnStart", "StagePreFired",
  "StagePostFired", "ProviderRequestStarted", "ProviderRequestCompleted",
  "ProviderRequestFailed", "ProviderRetry", "ContextCompacted", "ToolInvocationProposed",
  "RenderEmitted", "TurnEnded", "StageEntered", "StageAssertOutcome", "StageExited",
  "ProviderFallback", "ContextProvided", "ContextSkipped",
]);

const NO_LANE = new Set([
  "WorkflowAttached", "WorkflowExit", "InterruptReceived", "AuditViolation", "InputRejected",
  "SessionConfigured", "PushNotificationAbandoned",
]);

// event kinds the timeline deliberately does not draw: the events list shows them raw
// (tests/console/test_static.py fails on a kind of schemas/ that is neither drawn nor here)
export const SHOWN_RAW = [
  "SessionTurnEnd", // the session actor's bookkeeping: its turn's TurnEnded is drawn
];

const STAGE_NOTE = {
  StageCheckGateResult: "gate", StageCompletionChecked: "completion", StageGranted: "granted",
  StageCancelled: "stage cancelled", StageInitFailed: "stage init failed",
};

// a stage of turn `t` ended: by its StagePostFired, or the `previous` of the next StagePreFired
function stageEnded(t, ended, at) {
  const span = t.stages.findLast((s) => s.stage === ended.stage && s.iteration === ended.iteration && !s.end);
  if (span) {
    span.end = at;
    span.outcome = ended.outcome;
  }
}

export class Timeline {
  constructor() {
    this.turns = new Map();
    this.order = [];
    this.notes = []; // session-level events: a workflow attached or exited, a violation
    this.calls = new Map(); // invocationId -> call (and its turn)
    this.prompts = new Map(); // interactionId -> call
    this.children = new Map(); // a spawn call's invocationId -> its sub-turn
    this.inputs = new Map(); // an InputAccepted's event id -> its turn
    this.absorbed = new Set(); // turn ids of replies delivered into a turn, not as a turn
    this.seqs = []; // every event: [seq, type, time, turnId]
    this.workflow = false;
    this.agent = null; // the session's agent (SessionConfigured)
    this.dirty = new Set();
    this.early = new Map(); // tokens that came before their model call's event: turn|round -> text
  }

  turn(id, seq, time) {
    let turn = this.turns.get(id);
    if (!turn) {
      turn = {
        id, seq, status: "queued", items: [], stages: [], iterations: new Map(),
        tokensIn: 0, tokensCached: 0, tokensOut: 0, usd: null, calls: 0, startedAt: time, endedAt: null,
      };
      this.turns.set(id, turn);
      this.order.push(turn);
    }
    this.dirty.add(id);
    return turn;
  }

  get active() {
    for (let i = this.order.length - 1; i >= 0; i--) {
      if (this.order[i].status === "running") return this.order[i];
    }
    return null;
  }

  apply(seq, type, e) {
    const d = e.data || {};
    this.seqs.push([seq, type, e.time, e.turnId]);
    const turnId = e.turnId || d.stageExecutionId;
    if (this.absorbed.has(turnId)) return; // a child's reply its spawn call took: no lane
    // session-level facts may carry a turn id: they join a lane that exists, never open one
    const t = !turnId ? null : NO_LANE.has(type) ? this.turns.get(turnId) || null : this.turn(turnId, seq, e.time);
    if (t && NO_LANE.has(type)) this.dirty.add(t.id);
    if (!t && IN_A_TURN.has(type)) {
      this.notes.push({ seq, text: type });
      return;
    }
    switch (type) {
      case "InputAccepted":
        this.inputs.set(e.id, t);
        if (d.kind === "message") {
          t.items.push({ kind: "input", text: d.text, sender: d.sender, seq, parent: d.parent, files: d.attachments, session: e.sessionId });
        } else {
          t.items.push({ kind: "steer", text: d.text, sender: d.sender, seq });
        }
        break;
      case "InputRejected":
        if (t) {
          t.status = "rejected";
          t.reason = d.reason;
          t.items.push({ kind: "note", cls: "bad", text: `rejected (${d.kind}): ${d.reason}` });
        } else {
          this.notes.push({ seq, cls: "bad", text: `input rejected (${d.kind}): ${d.reason}` });
        }
        break;
      case "FollowUpQueued":
        t.status = "queued";
        t.items.push({ kind: "note", text: `queued behind turn ${short(d.behindTurnId)}` });
        break;
      case "SteeringInjected": {
        // a steer (or a child's reply) opened a lane of its own: it joins this turn instead
        const from = this.inputs.get(d.inputId);
        if (from && from !== t && this.absorb(from)) {
          const input = from.items[0];
          if (input?.kind === "steer") t.items.push(input);
        }
        t.items.push({ kind: "note", text: `steering injected: ${d.text}` });
        break;
      }
      case "InterruptReceived":
        (t || this.active)?.items.push({ kind: "note", cls: "warn", text: `${d.mode} interrupt from ${d.sender.id}` });
        if (!t && this.active) this.dirty.add(this.active.id);
        break;
      case "SessionTurnStart":
        t.status = "running";
        t.startedAt = e.time;
        if (!t.items.some((i) => i.kind === "input")) {
          t.items.unshift({ kind: "input", text: d.text, sender: d.sender, seq });
        }
        break;
      case "StagePreFired": {
        const left = d.previous; // schema 2: the stage it left, in the same event
        if (left) stageEnded(t, left, left.endedAt || e.time);
        t.stages.push({ stage: d.stage, iteration: d.iteration, start: e.time, end: null });
        break;
      }
      case "StagePostFired":
        stageEnded(t, d, e.time);
        break;
      case "ProviderRequestStarted": {
        const key = `${t.id}|${d.iteration}`;
        const it = { iteration: d.iteration, text: "", streaming: this.early.get(key) || "", model: `${d.provider}/${d.model}`, done: false };
        this.early.delete(key);
        t.iterations.set(d.iteration, it);
        t.items.push({ kind: "text", iteration: d.iteration });
        break;
      }
      case "ProviderRequestCompleted": {
        const it = t.iterations.get(d.iteration) || { iteration: d.iteration };
        it.text = d.message.content.filter((b) => b.type === "text").map((b) => b.text).join("");
        it.streaming = "";
        it.done = true;
        // all the input the model read: at the full price, written to and read from the cache
        const u = d.usage;
        t.tokensIn += (u.inputTokens || 0) + (u.cacheWriteTokens || 0) + (u.cacheReadTokens || 0);
        t.tokensCached += u.cacheReadTokens || 0;
        t.tokensOut += u.outputTokens || 0;
        break;
      }
      case "ProviderRequestFailed":
        t.items.push({ kind: "note", cls: "bad", text: `provider ${d.errorClass}: ${d.message}` });
        break;
      case "ProviderRetry":
        t.items.push({ kind: "note", cls: "warn", text: `retry ${d.attempt} in ${d.delayMs} ms (${d.errorClass})` });
        break;
      case "ContextCompacted":
        t.items.push({ kind: "note", text: `context compacted: ${d.droppedMessages} messages dropped` });
        break;
      case "ProviderFallback":
        t.items.push({ kind: "note", cls: "warn", text: `fallback ${d.from} → ${d.to} (${d.reason})` });
        break;
      case "ContextProvided":
        t.items.push({ kind: "note", text: `context ${d.provider}: ${d.tokens} tokens${d.truncated ? " (truncated)" : ""}` });
        break;
      case "ContextSkipped":
        t.items.push({ kind: "note", cls: "warn", text: `context ${d.provider} skipped: ${d.reason}` });
        break;
      case "ToolInvocationProposed": {
        const call = {
          id: d.invocationId, turn: t.id, tool: d.tool, args: d.args, status: "proposed",
          output: null, error: null, prompt: null, seq, skip: d.skip,
        };
        if (!d.known) call.status = "unknown tool";
        this.calls.set(d.invocationId, call);
        t.items.push({ kind: "call", call });
        t.calls++;
        break;
      }
      case "ToolCallModeInvoked":
        this.call(d.invocationId, (c) => (c.mode = `${d.mode}: ${d.verdict}`));
        break;
      case "InteractionRequested":
        this.call(d.invocationId, (c) => {
          c.prompt = { id: d.interactionId, text: d.prompt, deadline: d.deadline, answer: null };
          c.status = "awaiting approval";
          this.prompts.set(d.interactionId, c);
        });
        break;
      case "InteractionAnswered": {
        const c = this.prompts.get(d.interactionId);
        if (c) {
          c.prompt.answer = `${d.decision}d by ${d.sender.id}`;
          this.dirty.add(c.turn);
        }
        break;
      }
      case "ToolCallApproved":
        this.call(d.invocationId, (c) => {
          c.status = "approved";
          c.by = d.authority + (d.answeredBy ? ` (${d.answeredBy.id})` : "");
        });
        break;
      case "ToolCallDenied":
        this.call(d.invocationId, (c) => {
          c.status = d.timedOut ? "denied (timed out)" : "denied";
          c.error = d.reason;
        });
        break;
      case "ToolInvocationRequested":
        if (!this.calls.has(d.invocationId) && t) {
          // a log with no proposal for it (one an audit flags): drawn from the request
          const call = { id: d.invocationId, turn: t.id, tool: d.tool, args: d.args, status: "requested", output: null, error: null, prompt: null, seq };
          this.calls.set(d.invocationId, call);
          t.items.push({ kind: "call", call });
          t.calls++;
        }
        this.call(d.invocationId, (c) => (c.status = "requested"));
        break;
      case "ToolInvocationStarted":
        this.call(d.invocationId, (c) => (c.status = "running"));
        break;
      case "ToolInvocationSucceeded":
        this.call(d.invocationId, (c) => {
          c.status = "succeeded";
          c.output = d.output;
          c.duration = d.durationMs;
          if (d.truncated) c.cut = `cut to the result budget: ${d.size.toLocaleString()} bytes in all${d.blob ? `, kept as ${d.blob}` : ""}`;
        });
        break;
      case "ToolInvocationFailed":
        this.call(d.invocationId, (c) => {
          c.status = "failed";
          c.error = `${d.error.kind}: ${d.error.detail}`;
          c.duration = d.durationMs;
        });
        break;
      case "ToolInvocationCancelled":
        this.call(d.invocationId, (c) => {
          c.status = "cancelled";
          c.error = d.reason;
        });
        break;
      case "HookDecided":
        t?.items.push({ kind: "note", cls: d.action === "continue" ? "" : "warn", text: `hook ${d.hook} (${d.stage} ${d.point}): ${d.action}${d.reason ? ` — ${d.reason}` : ""}` });
        break;
      case "RenderEmitted":
        t.reply = d.text;
        break;
      case "TurnEnded":
        t.status = d.status;
        t.endedAt = e.time;
        t.failureClass = d.failureClass;
        t.reason = d.reason;
        t.nextAction = d.nextAction;
        if (d.reply != null) t.reply = d.reply;
        break;
      case "SubTurnSpawned": {
        const child = {
          session: d.childSessionId, agent: d.agent, mode: d.mode, depth: d.depth, task: d.task,
          status: "running", startedAt: e.time, endedAt: null, failureClass: null, delivered: null,
        };
        this.children.set(d.invocationId, child);
        const c = this.calls.get(d.invocationId);
        if (c) {
          (c.children ||= []).push(child);
          this.dirty.add(c.turn);
        } else {
          t?.items.push({ kind: "child", child });
        }
        break;
      }
      case "SubTurnEnded":
        this.child(d.invocationId, (k) => {
          k.status = d.status;
          k.endedAt = e.time;
          k.failureClass = d.failureClass;
        });
        break;
      case "SubTurnResultDelivered": {
        this.child(d.invocationId, (k) => (k.delivered = d.as));
        // the child's reply came in as an input of its own; taken as the spawn call's result
        // or steering (not a new turn), the lane its input opened goes
        const lane = d.as !== "follow_up" && this.inputs.get(d.inputId);
        if (lane) this.absorb(lane);
        break;
      }
      case "MessageSent":
        t?.items.push({ kind: "note", text: `${d.kind === "interrupt" ? "interrupt" : "message"} sent to ${d.to} (${d.cause}, hops ${d.hops})`, to: d.to });
        break;
      case "MessageDropped":
        t?.items.push({ kind: "note", cls: "warn", text: `message to ${d.to} dropped: ${d.reason} (hops ${d.hops}, ${d.cause})`, to: d.to });
        break;
      case "SessionConfigured":
        this.agent = d.agent;
        break;
      case "AuditViolation":
        this.notes.push({ seq, cls: "bad", violation: true, text: `audit: ${d.kind} — ${d.detail}`, eventSeq: d.eventSeq });
        if (t) t.items.push({ kind: "note", cls: "bad", text: `audit violation: ${d.kind} — ${d.detail}` });
        break;
      case "PushNotificationAbandoned":
        this.notes.push({ seq, cls: "warn", text: `A2A push to ${d.webhook} given up after ${d.attempts} attempts (update ${d.updateSeq}): ${d.error}` });
        break;
      case "WorkflowAttached":
        this.workflow = true;
        this.notes.push({ seq, text: `workflow ${d.workflow} attached (run ${short(d.runId)})` });
        break;
      case "StageEntered":
        this.workflow = true;
        t.stageName = d.stage;
        t.status = "running";
        t.items.push({ kind: "note", text: `workflow stage ${d.stage} entered (step ${d.step + 1})${d.recovers ? `, recovering ${d.recovers}` : ""}` });
        break;
      case "StageAssertOutcome":
        t.items.push({ kind: "note", cls: d.verdict === "ok" ? "" : "warn", text: `assert: ${d.verdict} (attempt ${d.attempt})${d.reason ? ` — ${d.reason}` : ""}` });
        break;
      case "StageExited":
        t.items.push({ kind: "note", text: `stage exited: ${d.result.verdict}` });
        break;
      case "WorkflowExit":
        this.notes.push({ seq, cls: d.status === "completed" ? "" : "bad", text: `workflow ${d.workflow} ${d.status}${d.reason ? `: ${d.reason}` : ""}` });
        break;
      default:
        if (type.startsWith("Stage") && t) {
          const what = STAGE_NOTE[type] || type;
          const how = d.outcome || d.tool || d.stage || "";
          t.items.push({ kind: "note", cls: ["block", "invalid", "batch_rejected"].includes(d.outcome) ? "warn" : "", text: `${what}${how ? `: ${how}` : ""}${d.reason ? ` — ${d.reason}` : ""}${d.detail && d.detail !== how ? ` — ${d.detail}` : ""}` });
        }
    }
  }

  call(invocationId, change) {
    const c = this.calls.get(invocationId);
    if (!c) return;
    change(c);
    this.dirty.add(c.turn);
  }

  /** Drop the lane an input opened when it never became a turn of its own. */
  absorb(lane) {
    if (lane.status !== "queued" || lane.items.length > 1 || !this.turns.has(lane.id)) return false;
    this.absorbed.add(lane.id);
    this.turns.delete(lane.id);
    this.order.splice(this.order.indexOf(lane), 1);
    this.dirty.add(lane.id);
    return true;
  }

  child(invocationId, change) {
    const k = this.children.get(invocationId);
    if (!k) return;
    change(k);
    const c = this.calls.get(invocationId);
    if (c) this.dirty.add(c.turn);
    else for (const t of this.order) if (t.items.some((i) => i.child === k)) this.dirty.add(t.id);
  }

  /** A token delta: true when it was drawn in place (no re-render needed). */
  token(d, root) {
    const t = this.turns.get(d.turnId);
    const it = t?.iterations.get(d.iteration);
    if (!it) {
      const key = `${d.turnId}|${d.iteration}`;
      this.early.set(key, (this.early.get(key) || "") + d.delta);
      return true;
    }
    if (it.done) return true;
    it.streaming += d.delta;
    const node = root.querySelector(`[data-stream="${CSS.escape(`${d.turnId}|${d.iteration}`)}"]`);
    if (!node) {
      this.dirty.add(t.id);
      return false;
    }
    node.textContent = it.streaming;
    node.classList.add("streaming");
    return true;
  }
}

export function laneHtml(t, { canApprove }) {
  const duration = t.endedAt && t.startedAt ? Date.parse(t.endedAt) - Date.parse(t.startedAt) : null;
  const running = t.status === "running";
  const elapsed = running && t.startedAt ? Date.now() - Date.parse(t.startedAt) : null;
  return html`<section class="lane s-${t.status}" id="turn-${t.id}" data-turn="${t.id}" data-seq="${t.seq}">
  <header class="lane-head">
    <span class="badge s-${t.status}">${t.status}</span>
    ${t.stageName ? html`<span class="chip">stage ${t.stageName}</span>` : ""}
    <span class="turn-id" title="${t.id}">turn ${short(t.id, 10)}</span>
    <span class="muted elapsed">${duration != null ? ms(duration) : elapsed != null ? `${ms(elapsed)}…` : ""}</span>
    <span class="muted tokens">${t.tokensIn || t.tokensOut ? spendText(t.tokensIn, t.tokensCached, t.tokensOut, t.usd) : ""}</span>
    ${t.calls ? html`<span class="muted">${t.calls} tool call${t.calls > 1 ? "s" : ""}</span>` : ""}
    ${t.failureClass ? html`<span class="badge bad">${t.failureClass}</span>` : ""}
  </header>
  ${stagesHtml(t)}
  <div class="lane-body">${t.items.map((item) => itemHtml(t, item, canApprove))}
  ${t.reply && t.reply.trim() !== said(t) ? html`<div class="msg reply"><span class="who">reply</span>${t.reply}</div>` : ""}
  ${t.status !== "running" && t.reason ? html`<div class="end ${t.status === "completed" ? "" : "bad"}">${t.reason}${t.nextAction ? html`<br><span class="muted">next: ${t.nextAction}</span>` : ""}</div>` : ""}
  </div>
</section>`;
}

/** What the model said over the turn's rounds (the reply, unless a hook changed it). */
function said(t) {
  return [...t.iterations.values()].map((it) => it.text).filter(Boolean).join("\n\n").trim();
}

/** A running lane's clock and stage bar, redrawn in place (its buttons stay as they are). */
export function tick(t, lane) {
  if (t.status !== "running" || !t.startedAt) return;
  const elapsed = lane.querySelector(".elapsed");
  if (elapsed) elapsed.textContent = `${ms(Date.now() - Date.parse(t.startedAt))}…`;
  const bar = lane.querySelector(".stages");
  if (bar && t.stages.length) bar.outerHTML = String(stagesHtml(t, false));
}

function stagesHtml(t, table = true) {
  if (!t.stages.length) return "";
  const now = Date.now();
  const spans = t.stages.map((s) => {
    const end = s.end ? Date.parse(s.end) : now;
    return { ...s, ms: Math.max(0, end - Date.parse(s.start)) };
  });
  const total = spans.reduce((a, s) => a + s.ms, 0) || 1;
  const segs = spans.map((s) => {
    const grow = Math.max(s.ms / total, 0.02);
    const label = `${STAGE_LABEL[s.stage] || s.stage} #${s.iteration}: ${s.end ? ms(s.ms) : "running"}${s.outcome && s.outcome !== "ok" ? ` (${s.outcome})` : ""}`;
    return html`<span class="seg g-${s.stage}${s.end ? "" : " open"}${s.outcome === "failed" ? " failed" : ""}" style="flex-grow:${grow.toFixed(4)}" title="${label}">${grow > 0.12 ? STAGE_LABEL[s.stage] : ""}</span>`;
  });
  const rows = spans.map((s) => html`<tr><td>${s.iteration}</td><td><i class="dot g-${s.stage}"></i>${STAGE_LABEL[s.stage] || s.stage}</td><td>${s.end ? ms(s.ms) : "running"}</td><td>${s.outcome || ""}</td></tr>`);
  const bar = html`<div class="stages" role="img" aria-label="stages">${segs}</div>`;
  if (!table) return bar;
  return html`${bar}
  <details class="stage-table" data-key="stages-${t.id}"><summary>${spans.length} stages</summary><table><tr><th>round</th><th>stage</th><th>took</th><th>outcome</th></tr>${rows}</table></details>`;
}

function itemHtml(t, item, canApprove) {
  switch (item.kind) {
    case "input":
      return html`<div class="msg user"><span class="who">${item.sender?.id || "user"}${item.parent ? html` · sub-turn of <a class="parent-link" href="#/s/${encodeURIComponent(item.parent.sessionId)}">${item.parent.sessionId}</a>` : ""}</span>${item.text}${filesHtml(item)}</div>`;
    case "steer":
      return html`<div class="msg steer"><span class="who">steer · ${item.sender?.id || ""}</span>${item.text}</div>`;
    case "text": {
      const it = t.iterations.get(item.iteration);
      const text = it?.done ? it.text : it?.streaming;
      if (it?.done && !text) return "";
      return html`<div class="msg assistant"><span class="who">assistant · round ${item.iteration}</span><span class="text${it?.done ? "" : " streaming"}" data-stream="${t.id}|${item.iteration}">${text || ""}</span></div>`;
    }
    case "call":
      return callHtml(item.call, canApprove);
    case "child":
      return html`<ul class="subturns">${childHtml(item.child)}</ul>`;
    default:
      return html`<div class="note ${item.cls || ""}">${item.text}</div>`;
  }
}

const IMAGES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);

function bytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

/** A message's attachments: a thumbnail for an image (its bytes fetched with the key:
 * `loadThumbs`), the name as a download link, the type and size. */
function filesHtml(item) {
  if (!item.files?.length) return "";
  const base = `/v1/sessions/${encodeURIComponent(item.session)}/attachments/`;
  const one = (f) => html`<figure class="file" data-file="${f.sha256}">${
    IMAGES.has(f.mediaType) ? html`<img class="thumb" alt="${f.name}" data-src="${base + f.sha256}">` : html`<span class="file-icon" aria-hidden="true">▤</span>`
  }<figcaption><a href="${base + f.sha256}" data-download="${f.name}">${f.name}</a><span class="muted">${f.mediaType} · ${bytes(f.size)}</span></figcaption></figure>`;
  return html`<div class="files" aria-label="attachments">${item.files.map(one)}</div>`;
}

function callHtml(c, canApprove) {
  const open = c.prompt && !c.prompt.answer && c.status === "awaiting approval";
  return html`<div class="call c-${c.status.split(" ")[0]}" data-invocation="${c.id}">
  <div class="call-head"><span class="tool">⚙ ${c.tool}</span><span class="badge c-${c.status.split(" ")[0]}">${c.status}</span>${c.duration != null ? html`<span class="muted">${ms(c.duration)}</span>` : ""}${c.by ? html`<span class="muted">by ${c.by}</span>` : ""}${c.mode ? html`<span class="muted">mode ${c.mode}</span>` : ""}</div>
  <div class="kv"><span class="k">args</span>${folded("arguments", c.args, 160, `args-${c.id}`)}</div>
  ${c.output != null ? html`<div class="kv"><span class="k">result</span>${folded("result", c.output, 160, `out-${c.id}`)}</div>` : ""}
  ${c.cut ? html`<div class="kv"><span class="k"></span><span class="muted">${c.cut}</span></div>` : ""}
  ${c.error ? html`<div class="kv bad"><span class="k">error</span>${c.error}</div>` : ""}
  ${c.skip ? html`<div class="kv"><span class="k">skipped</span>${c.skip}</div>` : ""}
  ${c.children ? html`<ul class="subturns" aria-label="sub-turns">${c.children.map(childHtml)}</ul>` : ""}
  ${c.prompt ? html`<div class="prompt${open ? " open" : ""}"><div>${folded("prompt", c.prompt.text, 200, `prompt-${c.id}`)}</div>${
    open
      ? canApprove
        ? html`<div class="actions"><button class="approve" data-action="approve" data-interaction="${c.prompt.id}">Approve</button><button class="deny" data-action="deny" data-interaction="${c.prompt.id}">Deny</button><span class="muted">until ${new Date(c.prompt.deadline).toLocaleTimeString()}</span></div>`
        : html`<div class="muted">awaiting approval</div>`
      : html`<div class="muted">${c.prompt.answer || "answered"}</div>`
  }</div>` : ""}
</div>`;
}

/** A sub-turn (DESIGN §11): a link to the child session, its agent, mode, status and time. */
function childHtml(k) {
  const took = k.endedAt ? Date.parse(k.endedAt) - Date.parse(k.startedAt) : null;
  const status = k.status === "running" ? "running" : k.status;
  return html`<li class="subturn" data-child="${k.session}">
  <a class="child-link" href="#/s/${encodeURIComponent(k.session)}" title="${k.session}">↳ ${k.session}</a>
  ${k.agent ? html`<span class="chip">${k.agent}</span>` : ""}
  <span class="chip">${k.mode}</span>
  <span class="badge s-${status}">${status}</span>
  ${k.failureClass ? html`<span class="badge bad">${k.failureClass}</span>` : ""}
  <span class="muted">${took != null ? ms(took) : "…"}</span>
  ${k.delivered ? html`<span class="muted">→ ${k.delivered.replace("_", " ")}</span>` : ""}
  <div class="muted task">${k.task}</div>
</li>`;
}

export function notesHtml(notes) {
  return raw(notes.map((n) => `<div class="note session-note ${n.cls || ""}" data-seq="${n.seq}">${esc(n.text)}${n.eventSeq ? ` <a href="#" data-goto="${n.eventSeq}">event ${n.eventSeq}</a>` : ""}</div>`).join(""));
}

export { STAGES, STAGE_LABEL };

/** `12,025 in (50% cached) · 10 out · $0.0246`: a turn's or a session's model spend (the
 * dollars from the HTTP face's price table, when it knows the model). */
export function spendText(tokensIn, cached, tokensOut, usd) {
  const n = (v) => v.toLocaleString("en-US");
  const share = tokensIn && cached ? ` (${Math.round((100 * cached) / tokensIn)}% cached)` : "";
  const dollars = usd != null ? ` · $${usd.toFixed(4)}` : "";
  return `${n(tokensIn)} in${share} · ${n(tokensOut)} out${dollars}`;
}
