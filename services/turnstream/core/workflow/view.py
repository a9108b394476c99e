"""A workflow run as people read it: one row per stage execution (status, replay)."""

from __future__ import annotations

from dataclasses import dataclass

from turnstream.core.workflow.state import WorkflowRun


@dataclass(frozen=True)
class StageRow:
    step: int
    stage: str
    role: str
    status: str
    verdict: str | None
    attempts: int
    duration_s: float | None
    reason: str | None


def stage_rows(run: WorkflowRun) -> list[StageRow]:
    """Every stage of the definition in order, with its latest execution (if any)."""
    latest = {ex.stage_id: ex for ex in run.executions}
    rows: list[StageRow] = []
    for index, step in enumerate(run.definition.steps):
        names = [*step.stages, *([step.join] if step.join else [])]
        recover = [
            ex.stage_id for ex in run.executions if ex.step == index and ex.role == "recover"
        ]
        for name in [*names, *recover]:
            ex = latest.get(name)
            role = "join" if name == step.join else ("recover" if name in recover else "stage")
            if len(step.stages) > 1 and role == "stage":
                role = "parallel"
            if ex is None:
                rows.append(StageRow(index, name, role, "pending", None, 0, None, None))
                continue
            ended = ex.exited_at
            duration = (ended - ex.entered_at).total_seconds() if ended else None
            verdict = ex.result.verdict if ex.result else None
            reason = ex.result.reason if ex.result else ex.failure
            status = "running" if ex.status == "act" else ex.status
            rows.append(StageRow(index, name, role, status, verdict, ex.attempt, duration, reason))
    return rows
