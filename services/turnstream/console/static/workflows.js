// The workflows view: each definition in TURNSTREAM_WORKFLOWS drawn as a graph, and a form
// to attach one to a session (the run is then drawn live on the session's page).

import { api, post } from "./api.js";
import { fromDefinition, graphHtml } from "./graph.js";
import { $, html } from "./util.js";

export function workflowsView(root, { toast }) {
  root.innerHTML = String(html`<h1>Workflows</h1><div id="defs" class="muted">reading…</div>`);
  (async () => {
    let items;
    try {
      items = (await api("/v1/workflows")).items;
    } catch (error) {
      toast(error.message);
      return;
    }
    $("#defs", root).className = "";
    $("#defs", root).innerHTML = items.length
      ? String(html`${items.map((w) => (w.valid ? validHtml(w) : html`<section class="panel"><h2>${w.name} <span class="badge bad">invalid</span></h2><ul>${w.problems.map((p) => html`<li>${p}</li>`)}</ul></section>`))}`)
      : "No workflow definitions (TURNSTREAM_WORKFLOWS).";
  })();
  root.addEventListener("submit", async (e) => {
    e.preventDefault();
    const form = new FormData(e.target);
    const session = form.get("session");
    try {
      const ctx = form.get("ctx").trim() ? JSON.parse(form.get("ctx")) : {};
      await post(`/v1/sessions/${encodeURIComponent(session)}/workflow`, { workflow: form.get("workflow"), ctx });
      location.hash = `#/s/${encodeURIComponent(session)}`;
    } catch (error) {
      toast(error.message);
    }
  });
  return () => {};
}

function validHtml(w) {
  const d = w.definition;
  const stages = Object.entries(d.stages || {});
  return html`<section class="panel wf-def" data-workflow="${w.name}">
    <h2>${w.name} <span class="muted">${stages.length} stages</span></h2>
    ${graphHtml(fromDefinition(d))}
    <form class="attach"><input type="hidden" name="workflow" value="${w.name}">
      <input name="session" placeholder="session id" aria-label="session to attach to" required>
      <input name="ctx" class="ctx" placeholder='ctx as JSON, e.g. {"task": "…"}' aria-label="workflow ctx (JSON)">
      <button>Attach to session</button></form>
  </section>`;
}
