"""A workflow run's steps (`turnstream.core.session.run`): once nothing is left to do
inside its stages, the step moves on, runs its join or `onFail` branch, fails, or the run
ends; entering a step enters its stage, or all its siblings at once."""

from __future__ import annotations

from turnstream.core.events import Event, StageResult
from turnstream.core.session.state import SessionState
from turnstream.core.turn.state import Context
from turnstream.core.workflow.build import cancel, enter, exit_run
from turnstream.core.workflow.state import StageRun, WorkflowRun


def after_executions(state: SessionState, run: WorkflowRun, ctx: Context) -> list[Event]:
    """Nothing to do inside a stage: move the step on, fail it, or end the run."""
    current = run.current()
    step = run.step_def()
    failed = [ex for ex in current if ex.result is not None and not ex.succeeded]
    running = [ex for ex in current if ex.running]
    if running:
        siblings = [ex for ex in failed if ex.role == "stage"]
        others = [ex for ex in running if ex.role == "stage"]
        if siblings and step.parallel and others:
            first = siblings[0]
            why = f"sibling {first.stage_id} failed: {_why(first)}"
            return cancel(run, others, "ParallelSiblingFailure", why, ctx)
        return []
    recover = next((ex for ex in current if ex.role == "recover"), None)
    if recover is not None:
        if recover.succeeded:
            return _next_workflow_step(state, run, ctx)
        why = f"recover stage {recover.stage_id} failed too: {_why(recover)}"
        return [exit_run(state.session_id, run, "failed", "StageFailed", why, ctx)]
    if failed:
        first = failed[0]
        branch = run.definition.on_fail.get(first.stage_id)
        if branch is not None and run.interrupt is None:
            assert first.result is not None
            return enter(
                state.session_id, run, branch, run.step, (first.result,), ctx, recovers=first
            )
        if step.parallel and first.role == "stage":
            kind = "ParallelSiblingFailure"
        elif first.status == "init_failed":
            kind = "StageInitFailed"
        else:
            kind = "StageFailed"
        return [
            exit_run(state.session_id, run, "failed", kind, f"{first.stage_id}: {_why(first)}", ctx)
        ]
    if step.join is not None and not any(ex.role == "join" for ex in current):
        if run.interrupt is not None:
            return [exit_run(state.session_id, run, "cancelled", "interrupted", "interrupted", ctx)]
        results = _step_results(run, current)
        return enter(state.session_id, run, step.join, run.step, results, ctx)
    return _next_workflow_step(state, run, ctx)


def _why(ex: StageRun) -> str:
    return (ex.result.reason if ex.result else None) or "no reason given"


def _step_results(run: WorkflowRun, current: list[StageRun]) -> tuple[StageResult, ...]:
    """What a step hands on: the recover branch's, the join's, or the siblings' results."""
    for role in ("recover", "join"):
        found = [ex.result for ex in current if ex.role == role and ex.result is not None]
        if found:
            return (found[-1],)
    step = run.step_def()
    by_stage = {ex.stage_id: ex.result for ex in current if ex.result is not None}
    return tuple(by_stage[s] for s in step.stages if s in by_stage)


def _next_workflow_step(state: SessionState, run: WorkflowRun, ctx: Context) -> list[Event]:
    if run.interrupt is not None:
        return [exit_run(state.session_id, run, "cancelled", "interrupted", "interrupted", ctx)]
    nxt = run.step + 1
    if nxt >= len(run.definition.steps):
        return [exit_run(state.session_id, run, "completed", None, None, ctx)]
    return enter_step(state, run, nxt, _step_results(run, run.current()), ctx)


def enter_step(
    state: SessionState,
    run: WorkflowRun,
    index: int,
    upstream: tuple[StageResult, ...],
    ctx: Context,
) -> list[Event]:
    step = run.definition.steps[index]
    if not step.parallel:
        return enter(state.session_id, run, step.stages[0], index, upstream, ctx)
    events: list[Event] = []
    for stage_id in step.stages:  # siblings see no upstream
        events += enter(state.session_id, run, stage_id, index, (), ctx)
    return events
