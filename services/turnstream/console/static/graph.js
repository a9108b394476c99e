// A workflow drawn as a graph: steps left to right, a parallel group as a column of stages
// followed by its join, an onFail branch hanging under the stage it recovers.

import { html, ms } from "./util.js";

/**
 * `wf`: {steps: [{stages, join}], onFail: {stage: recoverer}, rows?: [{stage, role, status,
 * verdict, attempts, durationS, reason}], step?: the current step index, status?}.
 */
export function graphHtml(wf) {
  const rows = new Map((wf.rows || []).map((r) => [r.stage, r]));
  // a stage an ended run never reached (an onFail nothing needed) will not run: not "pending"
  const ended = ["completed", "failed", "cancelled"].includes(wf.status);
  const cols = [];
  wf.steps.forEach((step, i) => {
    const current = wf.step === i && wf.status && !["completed", "failed", "cancelled"].includes(wf.status);
    const nodes = step.stages.map((name) => nodeHtml(name, rows, wf.onFail, step.stages.length > 1 ? "parallel" : "stage", ended));
    cols.push(html`<div class="wf-col${step.stages.length > 1 ? " wf-parallel" : ""}${current ? " wf-current" : ""}" data-step="${i}">
      ${step.stages.length > 1 ? html`<div class="wf-col-label">parallel</div>` : ""}${nodes}</div>`);
    if (step.join) {
      cols.push(html`<div class="wf-arrow join-arrow" aria-hidden="true">⇉</div>`);
      cols.push(html`<div class="wf-col wf-join" data-step="${i}"><div class="wf-col-label">join</div>${nodeHtml(step.join, rows, wf.onFail, "join", ended)}</div>`);
    }
    if (i < wf.steps.length - 1) cols.push(html`<div class="wf-arrow" aria-hidden="true">→</div>`);
  });
  return html`<div class="wf-graph" data-workflow="${wf.name || ""}">${cols}</div>`;
}

function nodeHtml(name, rows, onFail, role, ended) {
  const row = rows.get(name);
  const status = row?.status || (ended ? "not_run" : "pending");
  // an exited stage shows how it ended: ok, or the verdict that failed it
  const shown = status === "exited" && row.verdict ? row.verdict : status.replace("_", " ");
  const tone = { ok: "ok", exited: "ok", fail: "failed", init_failed: "failed", cancelled: "failed" }[shown] || shown;
  const recover = onFail?.[name];
  const detail = row
    ? [row.verdict, row.attempts ? `attempt ${row.attempts}` : null, row.durationS != null ? ms(row.durationS * 1000) : null].filter(Boolean).join(" · ")
    : "";
  return html`<div class="wf-cell">
    <div class="wf-node st-${tone}" data-stage="${name}" data-status="${status}" title="${row?.reason || ""}">
      <div class="wf-name">${name}</div>
      <div class="wf-status"><span class="badge st-${tone}">${shown}</span> <small class="muted">${role === "stage" ? "" : role}</small></div>
      ${detail ? html`<div class="wf-detail">${detail}</div>` : ""}
      ${row?.reason ? html`<div class="wf-reason">${row.reason}</div>` : ""}
    </div>
    ${recover ? html`<div class="wf-onfail"><span class="muted">onFail ↓</span>${nodeHtml(recover, rows, {}, "recover", ended)}</div>` : ""}
  </div>`;
}

/** A loaded definition (`GET /v1/workflows`, snake_case) in the shape `graphHtml` takes. */
export function fromDefinition(definition) {
  return {
    name: definition.name,
    steps: definition.steps.map((s) => ({ stages: s.stages, join: s.join })),
    onFail: definition.on_fail || {},
  };
}
