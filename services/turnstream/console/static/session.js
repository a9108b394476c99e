// A session: its turns as lanes (live), the commands (send, steer, interrupt, approve), the
// replay slider (the state the server rebuilds at any event) and the workflow graph.

import { allEvents, api, blobUrl, follow, post } from "./api.js";
import { graphHtml } from "./graph.js";
import { Timeline, laneHtml, notesHtml, spendText, tick } from "./timeline.js";
import { $, debounce, folded, html, raw, short } from "./util.js";

const LIVE_HINT = '<p class="muted hint">Drag the slider (or use the arrow keys on it) to see the session rebuilt by the server at any event: its history, pending approvals and workflow stage.</p>';

export function sessionView(root, { session, params, toast }) {
  const enc = encodeURIComponent(session);
  root.innerHTML = String(html`<div class="session-page">
  <div class="session-head">
    <a href="#/" class="back">← sessions</a>
    <h1 title="${session}">${session}</h1>
    <span class="badge" id="state">loading</span>
    <span class="chip" id="agent" hidden></span>
    <span class="chip" id="spend" hidden title="the session's model tokens and their cost"></span>
    <span class="conn" id="conn" title="the event stream">…</span>
    <a href="#" id="waiting" class="badge needs" hidden></a>
    <span class="spacer"></span>
    <button id="int-graceful" class="warn" disabled title="finish with a summary">Interrupt</button>
    <button id="int-hard" class="danger" disabled title="cancel at once">Hard stop</button>
  </div>
  <div class="session-grid">
    <div class="main-col">
      <section class="panel" id="wf" hidden><h2>Workflow <span class="muted" id="wf-name"></span></h2><div id="wf-graph"></div></section>
      <div id="notes"></div>
      <div id="lanes" aria-live="polite"></div>
      <form id="composer" class="composer">
        <textarea name="text" rows="2" placeholder="Message (a follow-up if a turn is running)…" aria-label="message"></textarea>
        <div class="composer-actions">
          <button name="send" value="message">Send</button>
          <button name="send" value="steer" id="steer" disabled title="inject into the running turn">Steer</button>
        </div>
      </form>
    </div>
    <aside class="side-col">
      <section class="panel" id="replay">
        <h2>Replay <span class="muted" id="replay-mode">live</span></h2>
        <input type="range" id="slider" min="0" max="0" value="0" aria-label="replay position" disabled>
        <div class="replay-label" id="replay-label">—</div>
        <div class="replay-actions">
          <button id="to-live" class="small" disabled>Back to live</button>
          <button id="verify" class="small" title="turnstream replay --verify">Verify replay</button>
          <span id="verify-result" class="muted"></span>
        </div>
        <div id="replay-state" class="replay-state">${raw(LIVE_HINT)}</div>
      </section>
    </aside>
  </div>
</div>`);

  const tl = new Timeline();
  const lanes = $("#lanes", root);
  let canApprove = true;
  let atSeq = null; // null: live
  let stream = null;
  let scheduled = false;
  let closed = false;
  let wfTimer = null;
  const clock = setInterval(() => {
    const active = tl.active;
    const lane = active && document.getElementById(`turn-${active.id}`);
    if (lane) tick(active, lane);
  }, 1000);
  const openDetails = new Set();

  // what the session and each turn cost, priced by the HTTP face (its price table)
  let spendAsked = 0;
  const askSpend = debounce(async () => {
    const asked = ++spendAsked;
    try {
      const s = await api(`/v1/sessions/${enc}`);
      if (closed || asked !== spendAsked) return;
      for (const row of s.turns || []) {
        const turn = tl.turns.get(row.turnId);
        if (turn && row.spend && turn.usd !== row.spend.usd) {
          turn.usd = row.spend.usd;
          tl.dirty.add(turn.id);
        }
      }
      const total = s.spend;
      const chip = $("#spend", root);
      chip.hidden = !total || !(total.inputTokens || total.outputTokens);
      if (total) chip.textContent = spendText(total.inputTokens, total.cacheReadTokens, total.outputTokens, total.usd);
      schedule();
    } catch {
      /* the spend is a nicety: the lanes still show the tokens */
    }
  }, 400);
  let turnsEnded = 0; // nothing is spent before a turn ends (and a new session has no row yet)

  // attachments' bytes, fetched once with the key (an <img> cannot send it) and kept as
  // object URLs while the view is open: a lane drawn again shows them at once
  const files = new Map();
  const fileUrl = (path) => {
    if (!files.has(path)) files.set(path, blobUrl(path).catch((error) => (files.delete(path), Promise.reject(error))));
    return files.get(path);
  };
  const loadThumbs = () => {
    for (const img of lanes.querySelectorAll("img.thumb[data-src]:not([src])")) {
      fileUrl(img.dataset.src).then((url) => (img.src = url), () => img.replaceWith(Object.assign(document.createElement("span"), { className: "file-icon", textContent: "▤" })));
    }
  };

  const render = () => {
    scheduled = false;
    if (closed) return;
    // a reader at the bottom keeps following the newest events; one who scrolled up stays
    // (a workflow's graph, at the top, is the overview: its page stays where it is)
    const following = !tl.workflow && window.innerHeight + window.scrollY >= document.body.scrollHeight - 160;
    for (const id of tl.dirty) {
      const turn = tl.turns.get(id);
      const existing = document.getElementById(`turn-${id}`);
      if (!turn) {
        existing?.remove();
        continue;
      }
      const tpl = document.createElement("template");
      tpl.innerHTML = String(laneHtml(turn, { canApprove }));
      const lane = tpl.content.firstElementChild;
      for (const d of lane.querySelectorAll("details[data-key]")) if (openDetails.has(d.dataset.key)) d.open = true;
      if (atSeq != null && turn.seq > atSeq) lane.classList.add("future");
      if (existing) existing.replaceWith(lane);
      else lanes.appendChild(lane);
    }
    tl.dirty.clear();
    loadThumbs();
    if (tl.notes.length !== notesShown) {
      notesShown = tl.notes.length;
      $("#notes", root).innerHTML = String(notesHtml(tl.notes));
    }
    const ended = tl.order.filter((t) => t.endedAt).length;
    if (ended !== turnsEnded) {
      turnsEnded = ended;
      askSpend();
    }
    const active = tl.active;
    const last = tl.order[tl.order.length - 1];
    const state = active ? "running" : last ? last.status : "no turns";
    const agent = $("#agent", root);
    agent.hidden = !tl.agent;
    agent.textContent = tl.agent ? `agent ${tl.agent}` : "";
    const badge = $("#state", root);
    badge.textContent = state;
    badge.className = `badge s-${state}`;
    $("#int-graceful", root).disabled = !active;
    $("#int-hard", root).disabled = !active;
    $("#steer", root).disabled = !active;
    const open = [...tl.prompts.values()].filter((c) => c.status === "awaiting approval" && !c.prompt.answer);
    const waiting = $("#waiting", root);
    waiting.hidden = open.length === 0;
    waiting.textContent = `${open.length} approval${open.length === 1 ? "" : "s"} waiting ↓`;
    updateSlider();
    if (tl.workflow) scheduleWorkflow();
    if (following && loaded && atSeq == null) window.scrollTo(0, document.body.scrollHeight);
  };
  let loaded = false;
  let notesShown = 0;
  const schedule = () => {
    if (!scheduled) {
      scheduled = true;
      requestAnimationFrame(render);
    }
  };

  // -- the replay slider ------------------------------------------------------------------
  const slider = $("#slider", root);
  function updateSlider() {
    const n = tl.seqs.length;
    slider.disabled = n === 0;
    slider.max = String(Math.max(0, n - 1));
    if (atSeq == null) slider.value = slider.max;
    label();
  }
  function label() {
    const i = Number(slider.value);
    const ev = tl.seqs[i];
    $("#replay-label", root).textContent = ev
      ? `event ${i + 1} of ${tl.seqs.length} · seq ${ev[0]} · ${ev[1]}${ev[3] ? ` · turn ${short(ev[3])}` : ""} · ${new Date(ev[2]).toLocaleTimeString()}`
      : "no events yet";
    $("#replay-mode", root).textContent = atSeq == null ? "live" : `at seq ${atSeq}`;
    $("#to-live", root).disabled = atSeq == null;
  }
  const fetchState = debounce(async (seq) => {
    try {
      const state = await api(`/v1/sessions/${enc}/replay?at=${seq}`);
      const box = $("#replay-state", root);
      box.classList.remove("loading");
      if (atSeq === seq) box.innerHTML = String(stateHtml(state));
      if (state.workflow) drawWorkflow(state.workflow);
    } catch (error) {
      toast(error.message);
    }
  }, 120);
  function seek(index) {
    const ev = tl.seqs[index];
    if (!ev) return;
    const live = index === tl.seqs.length - 1;
    atSeq = live ? null : ev[0];
    slider.value = String(index);
    for (const lane of lanes.children) lane.classList.toggle("future", atSeq != null && Number(lane.dataset.seq) > atSeq);
    for (const lane of lanes.querySelectorAll(".lane.at")) lane.classList.remove("at");
    if (atSeq != null && ev[3]) document.getElementById(`turn-${ev[3]}`)?.classList.add("at");
    label();
    if (atSeq == null) {
      $("#replay-state", root).innerHTML = LIVE_HINT;
      if (tl.workflow) scheduleWorkflow();
      return;
    }
    $("#replay-state", root).classList.add("loading");
    fetchState(atSeq);
  }
  slider.addEventListener("input", () => seek(Number(slider.value)));
  $("#to-live", root).addEventListener("click", () => seek(tl.seqs.length - 1));
  $("#verify", root).addEventListener("click", async () => {
    const out = $("#verify-result", root);
    out.textContent = "verifying…";
    out.className = "muted";
    try {
      const v = await api(`/v1/sessions/${enc}/verify`);
      out.textContent = v.equal ? `✔ rebuilt state equals the live state (${v.events} events)` : "✘ the state rebuilt from the log differs from the live state";
      out.className = v.equal ? "ok" : "bad";
    } catch (error) {
      out.textContent = error.message;
      out.className = "bad";
    }
  });

  // -- the workflow graph (the server's view of the run, redrawn as its events arrive) ------
  function scheduleWorkflow() {
    if (atSeq != null || wfTimer) return;
    wfTimer = setTimeout(async () => {
      wfTimer = null;
      try {
        const state = await api(`/v1/sessions/${enc}/replay`);
        if (state.workflow && atSeq == null) drawWorkflow(state.workflow);
      } catch (error) {
        toast(error.message);
      }
    }, 150);
  }
  function drawWorkflow(wf) {
    $("#wf", root).hidden = false;
    $("#wf-name", root).textContent = `${wf.name} · ${wf.status}`;
    $("#wf-graph", root).innerHTML = String(graphHtml(wf));
  }

  // -- commands -------------------------------------------------------------------------------
  lanes.addEventListener("toggle", (e) => {
    const key = e.target.dataset?.key;
    if (key) e.target.open ? openDetails.add(key) : openDetails.delete(key);
  }, true);
  lanes.addEventListener("click", async (e) => {
    const link = e.target.closest("a[data-download]");
    if (link) {
      e.preventDefault();
      try {
        const a = document.createElement("a");
        a.href = await fileUrl(link.getAttribute("href"));
        a.download = link.dataset.download;
        a.click();
      } catch (error) {
        toast(error.message);
      }
      return;
    }
    const button = e.target.closest("button[data-action]");
    if (!button) return;
    const box = button.closest(".actions");
    for (const b of box.querySelectorAll("button")) b.disabled = true;
    box.insertAdjacentHTML("beforeend", '<span class="muted sending">sending…</span>');
    try {
      await post(`/v1/sessions/${enc}/answers/${encodeURIComponent(button.dataset.interaction)}`, { decision: button.dataset.action });
    } catch (error) {
      if (error.status === 403) canApprove = false;
      toast(error.message);
      for (const b of box.querySelectorAll("button")) b.disabled = false;
      box.querySelector(".sending")?.remove();
    }
  });
  $("#waiting", root).addEventListener("click", (e) => {
    e.preventDefault();
    lanes.querySelector(".prompt.open")?.scrollIntoView({ block: "center", behavior: "smooth" });
  });
  $("#notes", root).addEventListener("click", (e) => {
    const a = e.target.closest("a[data-goto]");
    if (!a) return;
    e.preventDefault();
    goTo(Number(a.dataset.goto));
  });
  const command = async (path, body) => {
    try {
      await post(`/v1/sessions/${enc}/${path}`, body);
      return true;
    } catch (error) {
      toast(error.message);
      return false;
    }
  };
  $("#int-graceful", root).addEventListener("click", () => command("interrupt", { mode: "graceful" }));
  $("#int-hard", root).addEventListener("click", () => command("interrupt", { mode: "hard" }));
  $("#composer", root).addEventListener("submit", async (e) => {
    e.preventDefault();
    const form = e.target;
    const text = form.elements.text.value.trim();
    if (!text) return;
    const kind = e.submitter?.value || "message";
    if (await command(kind === "steer" ? "steer" : "messages", { text })) form.elements.text.value = "";
  });
  $("#composer", root).elements.text.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) e.target.form.requestSubmit();
  });

  function goTo(seq) {
    let index = tl.seqs.findIndex((ev) => ev[0] >= seq);
    if (index < 0) index = tl.seqs.length - 1;
    seek(index);
    const ev = tl.seqs[index];
    const lane = ev?.[3] && document.getElementById(`turn-${ev[3]}`);
    (lane || lanes.lastElementChild)?.scrollIntoView({ block: "center" });
  }

  // -- load: the log in JSON pages (fast, and a clear "caught up"), then the stream --------------
  const started = performance.now();
  (async () => {
    let events;
    try {
      events = await allEvents(session);
    } catch (error) {
      if (error.status === 401) return;
      $("#state", root).textContent = error.status === 403 ? "forbidden" : "unavailable";
      toast(error.message);
      events = [];
    }
    if (closed) return;
    for (const { seq, event } of events) tl.apply(seq, event.type, event);
    render();
    loaded = true;
    const after = events.length ? events[events.length - 1].seq : 0;
    root.querySelector(".session-page").dataset.loaded = "true";
    window.__turnstream = { ...(window.__turnstream || {}), timelineMs: performance.now() - started, lanes: tl.order.length };
    if (params.get("at")) goTo(Number(params.get("at")));
    else if (!tl.workflow) window.scrollTo(0, document.body.scrollHeight); // newest turn, as a chat
    stream = follow(session, {
      event(seq, type, data) {
        tl.apply(seq, type, data);
        schedule();
      },
      token(d) {
        if (!tl.token(d, lanes)) schedule();
      },
      status(s, why) {
        const conn = $("#conn", root);
        conn.textContent = s === "live" ? "● live" : s === "denied" ? `stream refused: ${why}` : "○ reconnecting…";
        conn.className = `conn ${s}`;
        if (s === "denied") canApprove = false;
      },
    }, after);
  })();

  return () => {
    closed = true;
    for (const url of files.values()) url.then(URL.revokeObjectURL, () => {});
    clearInterval(clock);
    stream?.close();
    clearTimeout(wfTimer);
  };
}

function stateHtml(s) {
  const a = s.active;
  return html`<div class="replay-grid">
    <div><span class="k">turn</span>${a ? html`<b>${short(a.turnId)}</b> in ${a.stage} (round ${a.iteration})` : "none running"}</div>
    <div><span class="k">ended</span>${s.turnsEnded} turn${s.turnsEnded === 1 ? "" : "s"}${s.lastStatus ? ` · last ${s.lastStatus}` : ""}${s.queued ? ` · ${s.queued} queued` : ""}</div>
    ${a && a.calls.length ? html`<div><span class="k">calls</span>${a.calls.map((c) => `${c.tool}: ${c.status}`).join(", ")}</div>` : ""}
    <div><span class="k">approvals</span>${s.pendingApprovals.length ? s.pendingApprovals.map((p) => html`<span class="badge needs" data-pending="${p.interactionId}">${p.tool} ${p.answered ? "answered" : "pending"}</span> `) : html`<span class="muted">none pending</span>`}</div>
    ${s.workflow ? html`<div><span class="k">workflow</span>${s.workflow.name}: ${s.workflow.status}${s.workflow.step >= 0 ? `, step ${s.workflow.step + 1}` : ""} ${s.workflow.rows.filter((r) => r.status !== "pending").map((r) => `${r.stage}=${r.status}`).join(" ")}</div>` : ""}
  </div>
  <h3>History at this point <span class="muted">(${s.history.length} messages)</span></h3>
  <ol class="history" data-count="${s.history.length}">${s.history.map((m, i) => html`<li class="h-${m.role}${m.isError ? " bad" : ""}"><span class="who">${m.role}</span>${m.text ? folded("text", m.text, 300, `h-${i}`) : ""}${m.toolCalls.map((c) => html`<div class="muted">⚙ ${c.name}(${JSON.stringify(c.arguments).slice(0, 120)})</div>`)}</li>`)}</ol>`;
}
