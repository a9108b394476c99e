// The audit view: the invariants the audit service checks, what it found (each violation
// linked to the events behind it), and `replay --verify` per session.

import { allEvents, allSessions, api } from "./api.js";
import { $, html } from "./util.js";

const CHECKS = [
  ["duplicate_terminal", "Exactly one TurnEnded per turn", "a turn that ended twice"],
  ["turn_overdue", "No turn open past its wall-time bound", "TURNSTREAM_MAX_TURN_SECONDS + grace"],
  ["unapproved_tool_run", "No tool runs without a ToolCallApproved", "for the same invocation"],
];
const MAX_SESSIONS = 50;

export function auditView(root, { toast }) {
  root.innerHTML = String(html`<h1>Audit</h1>
  <p class="muted">The audit service folds every event through these checks as it arrives and
  appends an <code>AuditViolation</code> to the session's log for each one broken.</p>
  <table class="checks"><thead><tr><th>invariant</th><th>kind</th><th>result</th></tr></thead>
  <tbody id="checks">${CHECKS.map(([kind, title, hint]) => html`<tr data-kind="${kind}"><td>${title}<div class="muted">${hint}</div></td><td><code>${kind}</code></td><td class="result muted">checking…</td></tr>`)}</tbody></table>
  <h2>Violations</h2><div id="violations" class="muted">reading…</div>
  <h2>Replay verification</h2>
  <p class="muted">Each session rebuilt from its log must equal the turn-runner's live state (<code>turnstream replay --verify</code>).</p>
  <button id="verify-all">Verify the ${MAX_SESSIONS} latest sessions</button>
  <table class="verify"><tbody id="verify-rows"></tbody></table>`);

  let stopped = false;
  let sessions = [];
  (async () => {
    try {
      sessions = await allSessions();
    } catch (error) {
      toast(error.message);
      return;
    }
    sessions.sort((a, b) => (b.updatedAt || "").localeCompare(a.updatedAt || ""));
    const flagged = sessions.filter((s) => s.violations > 0);
    const found = [];
    for (const s of flagged.slice(0, MAX_SESSIONS)) {
      if (stopped) return;
      const events = await allEvents(s.sessionId).catch(() => []);
      for (const { seq, event } of events) {
        if (event.type === "AuditViolation") found.push({ session: s.sessionId, seq, ...event.data, turnId: event.turnId });
      }
    }
    if (stopped) return;
    for (const [kind] of CHECKS) {
      const n = found.filter((v) => v.kind === kind).length;
      const cell = $(`tr[data-kind="${kind}"] .result`, root);
      cell.textContent = n ? `✘ ${n} violation${n > 1 ? "s" : ""}` : `✔ holds (${sessions.length} sessions)`;
      cell.className = `result ${n ? "bad" : "ok"}`;
    }
    $("#violations", root).innerHTML = found.length
      ? String(html`<table class="violations"><thead><tr><th>session</th><th>kind</th><th>what was seen</th><th>events</th></tr></thead><tbody>${found.map(violationRow)}</tbody></table>`)
      : "None found.";
  })();

  $("#verify-all", root).addEventListener("click", async (e) => {
    e.target.disabled = true;
    const tbody = $("#verify-rows", root);
    tbody.innerHTML = "";
    for (const s of sessions.slice(0, MAX_SESSIONS)) {
      if (stopped) return;
      const tr = document.createElement("tr");
      const href = `#/s/${encodeURIComponent(s.sessionId)}`;
      tr.innerHTML = String(html`<td><a href="${href}">${s.sessionId}</a></td><td class="muted">verifying…</td>`);
      tbody.appendChild(tr);
      try {
        const v = await api(`/v1/sessions/${encodeURIComponent(s.sessionId)}/verify`);
        tr.lastElementChild.textContent = v.equal ? `✔ equal (${v.events} events)` : "✘ differs";
        tr.lastElementChild.className = v.equal ? "ok" : "bad";
      } catch (error) {
        tr.lastElementChild.textContent = error.message;
        tr.lastElementChild.className = "bad";
      }
    }
    e.target.disabled = false;
  });
  return () => {
    stopped = true;
  };
}

function violationRow(v) {
  const base = `#/s/${encodeURIComponent(v.session)}`;
  return html`<tr><td><a href="${base}">${v.session}</a></td><td><code>${v.kind}</code></td><td>${v.detail}</td>
  <td>${v.eventSeq ? html`<a href="${base}?at=${v.eventSeq}">event ${v.eventSeq}</a> · ` : ""}<a href="${base}?at=${v.seq}">violation ${v.seq}</a></td></tr>`;
}
