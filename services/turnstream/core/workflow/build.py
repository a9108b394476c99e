"""The events of each step of a stage's lifecycle: enter, gate, assert, exit, cancel."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from turnstream.core.events import (
    Event,
    FailureClass,
    Sender,
    SessionTurnEnd,
    SessionTurnEndData,
    SessionTurnStart,
    SessionTurnStartData,
    Stage,
    StageAssertOutcome,
    StageAssertOutcomeData,
    StageCancelled,
    StageCancelledData,
    StageCheckGateResult,
    StageCheckGateResultData,
    StageEntered,
    StageEnteredData,
    StageExited,
    StageExitedData,
    StageInitFailed,
    StageInitFailedData,
    StageResult,
    WorkflowExit,
    WorkflowExitData,
)
from turnstream.core.immutable import with_changes
from turnstream.core.turn.builder import Builder
from turnstream.core.turn.completion import schema_errors
from turnstream.core.turn.state import ActiveTurn, Context
from turnstream.core.workflow.definition import StageDef
from turnstream.core.workflow.state import StageRun, WorkflowRun
from turnstream.core.workflow.template import TemplateError, render

MAX_GATE_CHECKS = 3
NEXT_ACTION = "see `turnstream workflow status SESSION`; attach the workflow again to rerun it"


def gate_events(
    run: WorkflowRun,
    ex: StageRun,
    outcome: Literal["pass", "defer", "block"],
    ctx: Context,
    *,
    gate: str | None = None,
    reason: str | None = None,
) -> list[Event]:
    b = lane_builder(run, ex, ctx)
    checks = ex.gate_checks + 1
    policy = stage_of(run, ex).resolution_policy
    retry_at = None
    if outcome != "pass" and policy == "retry-later" and checks < MAX_GATE_CHECKS:
        retry_at = ctx.now + timedelta(seconds=2 ** (checks - 1))
    data = StageCheckGateResultData(
        stage=ex.stage_id,
        stage_execution_id=ex.execution_id,
        outcome=outcome,
        gate=gate,
        reason=reason,
        checks=checks,
        retry_at=retry_at,
    )
    events: list[Event] = [b.make(StageCheckGateResult, data)]
    if outcome == "pass" or retry_at is not None:
        return events
    why = f"gate {gate or '?'} said {outcome}: {reason or 'no reason given'}"
    if policy == "skip":
        result = result_of(ex, "skip", why)
    else:
        tries = f" after {checks} checks" if policy == "retry-later" else ""
        result = result_of(ex, "fail", why + tries)
    return events + exit_events(run, ex, result, ctx, b.last_id)


def assert_events(
    run: WorkflowRun,
    ex: StageRun,
    verdict: Literal["ok", "retry", "fail"],
    reason: str | None,
    ctx: Context,
    *,
    asserter: str | None = None,
) -> list[Event]:
    policy = stage_of(run, ex).retry_policy
    if verdict == "retry" and ex.attempt >= policy.max_attempts:
        verdict = "fail"
        reason = f"{reason or 'retry asked'}; no attempts left (maxAttempts={policy.max_attempts})"
    retry_at = None
    if verdict == "retry" and policy.delay(ex.attempt + 1) > 0:
        retry_at = ctx.now + timedelta(seconds=policy.delay(ex.attempt + 1))
    turn = ex.lane.active
    assert turn is not None
    b = lane_builder(run, ex, ctx)
    data = StageAssertOutcomeData(
        stage=ex.stage_id,
        stage_execution_id=ex.execution_id,
        verdict=verdict,
        reason=reason,
        attempt=ex.attempt,
        parsed=ex.parsed,
        cap_hit=ex.cap_hit,
        retry_at=retry_at,
        asserter=asserter,
    )
    events: list[Event] = [b.make(StageAssertOutcome, data)]
    if verdict == "retry":
        return events
    result = result_of(ex, verdict, reason)
    return events + exit_events(run, ex, result, ctx, b.last_id)


def result_of(
    ex: StageRun, verdict: Literal["ok", "fail", "skip"], reason: str | None
) -> StageResult:
    return StageResult(
        stage=ex.stage_id,
        verdict=verdict,
        reason=reason,
        parsed=ex.parsed,
        cap_hit=ex.cap_hit,
        attempt_count=ex.attempt,
        output=ex.parsed if verdict == "ok" else None,
    )


def exit_events(
    run: WorkflowRun, ex: StageRun, result: StageResult, ctx: Context, last_id: str
) -> list[Event]:
    """StageExited, then the end of the stage's turn (if it is still open)."""
    b = lane_builder(run, ex, ctx)
    b.last_id = last_id
    data = StageExitedData(stage=ex.stage_id, stage_execution_id=ex.execution_id, result=result)
    return [b.make(StageExited, data), *end_lane(b, ex, result)]


def end_lane(b: Builder, ex: StageRun, result: StageResult | None) -> list[Event]:
    """Close the stage's turn: its one TurnEnded (unless it has it), then SessionTurnEnd.
    `result` None: the stage was cancelled."""
    turn = ex.lane.active
    if turn is None:
        return []
    ok = result is not None and result.verdict in ("ok", "skip")
    events: list[Event] = []
    if turn.end is None:
        if ok and result is not None:
            events.append(b.end("completed", reply=_summary(result)))
        else:
            if turn.stage_open:
                events.append(b.post(turn.stage, "failed"))
            if result is None:
                failure, reason = FailureClass.INTERRUPTED, ex.failure
            elif ex.status == "gate":
                failure, reason = FailureClass.POLICY_DENIED, result.reason
            else:
                failure, reason = FailureClass.REPORT_MISSING, result.reason
            events.append(b.end("failed", failure, reason=reason, next_action=NEXT_ACTION))
    status = "completed" if ok else "failed"
    events.append(b.make(SessionTurnEnd, SessionTurnEndData(status=status)))
    return events


def _summary(result: StageResult) -> str:
    return f"stage {result.stage}: {result.verdict}"


def cancel(
    run: WorkflowRun,
    running: list[StageRun],
    cause: Literal["ParallelSiblingFailure", "interrupted"],
    reason: str,
    ctx: Context,
) -> list[Event]:
    """Strict cancel: no Exit; each stage turn ends `failed, interrupted` at once, which
    also cancels its running tool invocations."""
    events: list[Event] = []
    for ex in running:
        b = lane_builder(run, ex, ctx)
        data = StageCancelledData(
            stage=ex.stage_id, stage_execution_id=ex.execution_id, reason=reason, cause=cause
        )
        events.append(b.make(StageCancelled, data))
        events += end_lane(b, with_changes(ex, failure=f"{cause}: {reason}"), None)
    return events


def enter(
    session_id: str,
    run: WorkflowRun,
    stage_id: str,
    step: int,
    upstream: tuple[StageResult, ...],
    ctx: Context,
    *,
    recovers: StageRun | None = None,
) -> list[Event]:
    """Setup: check upstream, render the body, open the stage's turn."""
    stage = run.definition.stages[stage_id]
    execution_id = ctx.new_id()
    b = Builder(session_id, pseudo_turn(run, execution_id, execution_id), ctx)
    dumped = [r.model_dump(mode="json", by_alias=True) for r in upstream]
    errors: list[str] = []
    if stage.inputs_schema:
        for i, item in enumerate(dumped):
            for error in schema_errors(stage.inputs_schema, item):
                errors.append(f"upstream[{i}] ({item['stage']}): {error}")
    system = ""
    if not errors:
        context = {
            **run.ctx,
            "upstream": dumped,
            "workflowRunId": run.run_id,
            "stageExecutionId": execution_id,
        }
        try:
            system = render(stage.body, context, {"id": stage.id, "name": stage.name})
        except TemplateError as exc:
            errors.append(str(exc))
    if errors:
        failed = StageInitFailedData(
            run_id=run.run_id,
            stage=stage_id,
            stage_execution_id=execution_id,
            step=step,
            recovers=recovers.stage_id if recovers else None,
            reason=errors[0],
            errors=errors,
        )
        return [b.make(StageInitFailed, failed)]
    group = run.definition.steps[step].stages
    siblings = [s for s in group if s != stage_id] if stage_id in group else []
    entered = StageEnteredData(
        run_id=run.run_id,
        stage=stage_id,
        stage_execution_id=execution_id,
        step=step,
        siblings=siblings if run.definition.steps[step].parallel and not recovers else [],
        recovers=recovers.stage_id if recovers else None,
        system=system,
        upstream=list(upstream),
    )
    return [b.make(StageEntered, entered), *lane_start(b, run, stage_id, execution_id)]


def lane_start(b: Builder, run: WorkflowRun, stage_id: str, execution_id: str) -> list[Event]:
    """The stage's own turn begins (its id is the stage execution id)."""
    stage = run.definition.stages[stage_id]
    kickoff = (
        f"Stage {stage.name} ({stage.id}) begins. Work as the system prompt says; when you "
        f"are done, call {stage.completion_tool} alone."
    )
    start = SessionTurnStartData(
        input_id=execution_id,
        text=kickoff,
        sender=Sender(kind="agent", id=f"workflow:{run.name}"),
    )
    return [b.make(SessionTurnStart, start, turn_id=execution_id), b.pre(Stage.RECEIVE_INPUT)]


def exit_run(
    session_id: str,
    run: WorkflowRun,
    status: Literal["completed", "failed", "cancelled"],
    failure: str | None,
    reason: str | None,
    ctx: Context,
) -> Event:
    b = Builder(session_id, pseudo_turn(run, run.run_id, run.run_id), ctx)
    data = WorkflowExitData(
        run_id=run.run_id,
        workflow=run.name,
        status=status,
        reason=reason,
        failure=failure,
        results=run.results,
    )
    return b.make(WorkflowExit, data)


def stage_of(run: WorkflowRun, ex: StageRun) -> StageDef:
    return run.definition.stages[ex.stage_id]


def lane_builder(run: WorkflowRun, ex: StageRun, ctx: Context) -> Builder:
    turn = ex.lane.active or pseudo_turn(run, ex.execution_id, ex.execution_id)
    return Builder(ex.lane.session_id, turn, ctx)


def pseudo_turn(run: WorkflowRun, turn_id: str, input_id: str) -> ActiveTurn:
    """Envelope fields for run-level events (the run's chat, trace and correlation)."""
    return ActiveTurn(
        turn_id=turn_id,
        input_id=input_id,
        chat_id=run.chat_id,
        trace_id=run.trace_id,
        correlation_id=run.correlation_id,
        reply_to=None,
        last_event_id=run.last_event_id,
    )
