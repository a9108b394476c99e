// The sessions view: the summaries (the audit projection) of the sessions changed last, a
// page at a time with how many there are (as `turnstream sessions`), live by polling,
// joined with the open approval prompts; the status filtered by the server, the rest
// searched in the page.

import { api, post, recentSessions } from "./api.js";
import { $, ago, debounce, html, short } from "./util.js";

const POLL_MS = 2000;
const PAGE = 100;
const MAX_PAGE = 1000;

export function sessionsView(root, { toast }) {
  root.innerHTML = String(html`<div class="toolbar">
    <h1>Sessions <span class="count muted" id="count"></span></h1>
    <input id="search" type="search" placeholder="Search id, agent, reply, failure…" aria-label="search">
    <select id="status" aria-label="status">
      <option value="">any status</option><option>active</option><option>completed</option>
      <option>failed</option><option>denied</option><option>idle</option>
    </select>
    <label class="check"><input type="checkbox" id="needs"> needs approval</label>
    <label class="check"><input type="checkbox" id="viol"> violations</label>
  </div>
  <form class="new-session" id="new">
    <input name="session" placeholder="session id" aria-label="new session id" pattern="[A-Za-z0-9_:\\-]{1,128}" required>
    <input name="text" placeholder="first message" aria-label="first message" required>
    <button>Start</button>
  </form>
  <div class="table-wrap"><table class="sessions">
    <thead><tr><th>session</th><th>status</th><th>agent</th><th>turns</th><th>last turn</th>
    <th>approvals</th><th>last failure</th><th class="num">tokens</th><th>updated</th></tr></thead>
    <tbody id="rows"></tbody>
  </table></div>
  <p class="more muted" id="more-row" hidden>
    <span id="more-note"></span> <button id="more" type="button">Show more</button>
  </p>
  <p class="empty muted" id="empty" hidden>No sessions yet: start one above, or send a message
  (<code>turnstream send demo hello</code>).</p>`);

  const rows = new Map(); // id -> {tr, key, summary, pending}
  const tbody = $("#rows", root);
  const filters = { q: "", status: "", needs: false, viol: false };
  let pending = new Map();
  let order = "";
  let limit = PAGE;
  let total = 0;
  let stopped = false;
  let timer = null;
  let controller = null;

  const apply = () => {
    let shown = 0;
    const items = [...rows.values()].sort((a, b) => (b.summary.updatedAt || "").localeCompare(a.summary.updatedAt || "") || a.summary.sessionId.localeCompare(b.summary.sessionId));
    const sig = items.map((r) => r.summary.sessionId).join("\n");
    if (sig !== order) {
      order = sig;
      const frag = document.createDocumentFragment();
      for (const r of items) frag.appendChild(r.tr);
      tbody.appendChild(frag);
    }
    const q = filters.q.toLowerCase();
    for (const r of items) {
      const s = r.summary;
      const ok =
        (!filters.status || s.status === filters.status) &&
        (!filters.needs || r.pending > 0) &&
        (!filters.viol || s.violations > 0) &&
        (!q || r.text.includes(q));
      r.tr.hidden = !ok;
      if (ok) shown++;
    }
    $("#count", root).textContent = rows.size ? `${shown} of ${total}` : "";
    $("#empty", root).hidden = rows.size > 0;
    const more = total > rows.size;
    $("#more-row", root).hidden = !more;
    $("#more-note", root).textContent = more ? `${rows.size} changed last of ${total}` : "";
    $("#more", root).hidden = limit >= MAX_PAGE;
  };

  const render = (summaries) => {
    const now = Date.now();
    const seen = new Set();
    for (const s of summaries) {
      seen.add(s.sessionId);
      const count = pending.get(s.sessionId) || 0;
      const key = `${JSON.stringify(s)}|${count}|${Math.floor((now - Date.parse(s.updatedAt || 0)) / 10000)}`;
      let r = rows.get(s.sessionId);
      if (!r) {
        const tr = document.createElement("tr");
        tr.dataset.session = s.sessionId;
        r = { tr, key: "" };
        rows.set(s.sessionId, r);
      }
      r.summary = s;
      r.pending = count;
      if (r.key !== key) {
        r.key = key;
        r.text = `${s.sessionId} ${s.agent || ""} ${s.lastReply || ""} ${s.lastFailureClass || ""} ${s.status}`.toLowerCase();
        r.tr.className = `st-${s.status}${count ? " needs" : ""}`;
        r.tr.innerHTML = rowHtml(s, count, now);
      }
    }
    for (const [id, r] of rows) {
      if (!seen.has(id)) {
        r.tr.remove();
        rows.delete(id);
      }
    }
    apply();
  };

  let polls = 0;
  async function poll() {
    if (stopped) return;
    const mine = ++polls; // a poll superseded (pollNow) neither renders nor goes on
    controller = new AbortController();
    try {
      const [page, prompts] = await Promise.all([
        recentSessions(limit, filters.status, controller.signal),
        api("/v1/approvals", { signal: controller.signal }).catch(() => ({ items: [] })),
      ]);
      pending = new Map();
      for (const p of prompts.items) if (!p.answered) pending.set(p.sessionId, (pending.get(p.sessionId) || 0) + 1);
      if (stopped || mine !== polls) return;
      total = page.total;
      render(page.items);
    } catch (error) {
      if (error.name !== "AbortError" && error.status !== 503 && error.status !== 401) toast(error.message);
    }
    if (!stopped && mine === polls) timer = setTimeout(poll, POLL_MS);
  }

  const refilter = debounce(apply, 60);
  $("#search", root).addEventListener("input", (e) => {
    filters.q = e.target.value.trim();
    refilter();
  });
  const pollNow = () => {
    clearTimeout(timer);
    controller?.abort();
    poll();
  };
  $("#status", root).addEventListener("change", (e) => {
    filters.status = e.target.value;
    apply();
    pollNow(); // the server filters: the page is the sessions in that status changed last
  });
  $("#more", root).addEventListener("click", () => {
    limit = Math.min(limit + PAGE, MAX_PAGE);
    pollNow();
  });
  $("#needs", root).addEventListener("change", (e) => {
    filters.needs = e.target.checked;
    apply();
  });
  $("#viol", root).addEventListener("change", (e) => {
    filters.viol = e.target.checked;
    apply();
  });
  tbody.addEventListener("click", (e) => {
    if (e.target.closest("a")) return;
    const tr = e.target.closest("tr[data-session]");
    if (tr) location.hash = `#/s/${encodeURIComponent(tr.dataset.session)}`;
  });
  $("#new", root).addEventListener("submit", async (e) => {
    e.preventDefault();
    const form = new FormData(e.target);
    const session = form.get("session");
    try {
      await post(`/v1/sessions/${encodeURIComponent(session)}/messages`, { text: form.get("text") });
      location.hash = `#/s/${encodeURIComponent(session)}`;
    } catch (error) {
      toast(error.message);
    }
  });
  $("#new", root).elements.session.value = `web-${new Date().toISOString().slice(5, 19).replace(/[-T:]/g, "")}`;

  poll();
  return () => {
    stopped = true;
    clearTimeout(timer);
    controller?.abort();
  };
}

function rowHtml(s, pending, now) {
  const href = `#/s/${encodeURIComponent(s.sessionId)}`;
  const last = s.openTurn || s.lastTurn;
  const failure = s.lastFailureClass;
  return String(html`<td class="sid"><a href="${href}">${s.sessionId}</a>${s.lastReply ? html`<div class="reply-preview muted">${s.lastReply.slice(0, 90)}</div>` : ""}</td>
  <td><span class="badge s-${s.status}">${s.status}</span></td>
  <td class="agent${s.agent ? "" : " muted"}">${s.agent || "default"}</td>
  <td class="num">${s.turns}${s.failed ? html` <span class="bad" title="failed">· ${s.failed}✘</span>` : ""}</td>
  <td><span title="${last || ""}">${short(last)}</span>${s.openTurn ? html` <span class="chip live">running</span>` : ""}</td>
  <td>${pending ? html`<span class="badge needs">${pending} pending</span>` : html`<span class="muted">—</span>`}</td>
  <td>${failure ? html`<span class="badge bad">${failure}</span>` : html`<span class="muted">—</span>`}${s.violations ? html` <span class="badge bad" title="audit violations">⚠ ${s.violations}</span>` : ""}</td>
  <td class="num muted">${s.inputTokens + s.outputTokens}</td>
  <td class="muted" title="${s.updatedAt || ""}">${ago(s.updatedAt, now)}</td>`);
}

