"""A session with a workflow attached: the stage lifecycle as a pure fold and decider.

    WorkflowAttached ──(no chat turn active)──► the first step
    each step: one stage, or a parallel group whose siblings all run at once
      Setup     upstream checked against inputsSchema, body rendered
                ─► StageEntered + the stage's own turn (turnId = stage execution id)
                   | StageInitFailed
      CheckGate StageCheckGateResult: pass | defer | block (→ resolutionPolicy)
      Act       the turn loop in the stage's lane, bounded by turnCap, until the
                completion channel accepts a result (StageCompletionChecked)
      Assert    StageAssertOutcome: ok | retry (Act again, same transcript) | fail
      Exit      StageExited{result} ─► TurnEnded ─► SessionTurnEnd
    a sibling that fails cancels the others (StageCancelled, no Exit); the join runs only
    when every sibling succeeded; a failed stage with an `onFail` branch runs it
    ─► WorkflowExit{completed | failed | cancelled}

`evolve`, `fold` and `decide` here are the session-level ones (`turnstream.core.turn`
exports them): without a workflow they are exactly the turn's.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Literal

from turnstream.core.events import (
    Event,
    EventBase,
    FailureClass,
    FollowUpQueued,
    FollowUpQueuedData,
    InterruptReceived,
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
    StageCompletionChecked,
    StageEntered,
    StageEnteredData,
    StageExited,
    StageExitedData,
    StageInitFailed,
    StageInitFailedData,
    StageResult,
    TurnEnded,
    WorkflowAttached,
    WorkflowExit,
    WorkflowExitData,
)
from turnstream.core.turn.builder import Builder
from turnstream.core.turn.decide import decide as decide_turn
from turnstream.core.turn.evolve import evolve as evolve_turn
from turnstream.core.turn.state import (
    ActiveTurn,
    Context,
    SessionState,
    StageSpec,
    TurnConfig,
    with_changes,
)
from turnstream.core.workflow.completion import schema_errors
from turnstream.core.workflow.definition import StageDef, WorkflowDef
from turnstream.core.workflow.state import StageRun, WorkflowRun
from turnstream.core.workflow.template import TemplateError, render

GATE = "CheckGate"
ASSERT = "Assert"
MAX_GATE_CHECKS = 3
NEXT_ACTION = "see `turnstream workflow status SESSION`; attach the workflow again to rerun it"

# ------------------------------------------------------------------------- evolve


def evolve(state: SessionState, event: Event) -> SessionState:
    """Fold one event into the session: the run's bookkeeping, a stage's lane, or the chat."""
    run = state.workflow
    if isinstance(event, WorkflowAttached):
        if run is not None and run.open:  # one run at a time: the next waits its turn
            return with_changes(state, workflow=with_changes(run, queued=(*run.queued, event)))
        return with_changes(state, workflow=_attached(event))
    if run is None:
        return evolve_turn(state, event)
    changed = _evolve_run(run, event)
    if changed is not None:
        return with_changes(state, workflow=changed)
    ex = run.lane_of(event.turn_id)
    if ex is None:
        if isinstance(event, InterruptReceived) and run.status == "running":
            mode = "hard" if "hard" in (run.interrupt, event.data.mode) else event.data.mode
            state = with_changes(state, workflow=with_changes(run, interrupt=mode))
        return evolve_turn(state, event)
    lane = evolve_turn(ex.lane, event)
    failure = ex.failure
    if isinstance(event, TurnEnded) and ex.running and event.data.status != "completed":
        failure = event.data.reason or event.data.status
    return with_changes(state, workflow=_replace(run, with_changes(ex, lane=lane, failure=failure)))


def fold(state: SessionState, events: list[Event]) -> SessionState:
    for event in events:
        state = evolve(state, event)
    return state


def _attached(event: WorkflowAttached) -> WorkflowRun:
    data = event.data
    return WorkflowRun(
        run_id=data.run_id,
        name=data.workflow,
        definition=WorkflowDef.from_dict(data.definition),
        ctx=data.ctx,
        chat_id=event.chat_id,
        trace_id=event.trace_id,
        correlation_id=event.correlation_id,
        attached_at=event.time,
        last_event_id=event.id,
    )


def _evolve_run(run: WorkflowRun, event: Event) -> WorkflowRun | None:
    """The run after one of its own events; None when the event is not the run's."""
    match event:
        case StageEntered(data=data):
            ex = StageRun(
                stage_id=data.stage,
                execution_id=data.stage_execution_id,
                step=data.step,
                lane=SessionState(event.session_id),
                system=data.system,
                entered_at=event.time,
                role="recover" if data.recovers else _role(run, data.stage, data.step),
            )
            return _add(run, ex, event)
        case StageInitFailed(data=data):
            result = StageResult(stage=data.stage, verdict="fail", reason=data.reason)
            ex = StageRun(
                stage_id=data.stage,
                execution_id=data.stage_execution_id,
                step=data.step,
                lane=SessionState(event.session_id),
                system="",
                entered_at=event.time,
                role="recover" if data.recovers else _role(run, data.stage, data.step),
                status="init_failed",
                result=result,
                exited_at=event.time,
            )
            return _add(run, ex, event)
        case StageCheckGateResult(data=data):
            return _update(
                run,
                data.stage_execution_id,
                gate_checks=data.checks,
                wait_until=data.retry_at,
                status="act" if data.outcome == "pass" else "gate",
            )
        case StageCompletionChecked(data=data):
            checked = run.lane_of(data.stage_execution_id)
            if checked is None:
                return run
            parsed = data.parsed if data.outcome == "accepted" else checked.parsed
            lane = evolve_turn(checked.lane, event)
            capped = data.outcome == "cap_hit"
            return _replace(run, with_changes(checked, lane=lane, parsed=parsed, cap_hit=capped))
        case StageAssertOutcome(data=data):
            asserted = run.lane_of(data.stage_execution_id)
            if asserted is None:
                return run
            lane = evolve_turn(asserted.lane, event)
            if data.verdict != "retry":
                final = with_changes(
                    asserted, lane=lane, asserted=data.verdict, assert_reason=data.reason
                )
                return _replace(run, final)
            retried = with_changes(
                asserted,
                lane=lane,
                attempt=data.attempt + 1,
                wait_until=data.retry_at,
                parsed=None,
                cap_hit=False,
            )
            return _replace(run, retried)
        case StageCancelled(data=data):
            why = f"{data.cause}: {data.reason}"
            return _update(
                run, data.stage_execution_id, status="cancelled", exited_at=event.time, failure=why
            )
        case StageExited(data=data):
            run = _update(
                run,
                data.stage_execution_id,
                status="exited",
                result=data.result,
                exited_at=event.time,
            )
            return with_changes(run, results={**run.results, data.stage: data.result})
        case WorkflowExit(data=data):
            if run.queued:
                return with_changes(_attached(run.queued[0]), queued=run.queued[1:])
            return with_changes(run, status=data.status, reason=data.reason)
    return None


def _role(run: WorkflowRun, stage_id: str, step: int) -> Literal["stage", "join"]:
    steps = run.definition.steps
    return "join" if step < len(steps) and steps[step].join == stage_id else "stage"


def _add(run: WorkflowRun, ex: StageRun, event: EventBase) -> WorkflowRun:
    return with_changes(
        run,
        executions=(*run.executions, ex),
        step=max(run.step, ex.step),
        status="running",
        last_event_id=event.id,
    )


def _replace(run: WorkflowRun, ex: StageRun) -> WorkflowRun:
    executions = tuple(ex if e.execution_id == ex.execution_id else e for e in run.executions)
    return with_changes(run, executions=executions)


def _update(run: WorkflowRun, execution_id: str, **changes: Any) -> WorkflowRun:
    ex = run.lane_of(execution_id)
    return run if ex is None else _replace(run, with_changes(ex, **changes))


# ------------------------------------------------------------------------- decide


def decide(state: SessionState, config: TurnConfig, ctx: Context) -> list[Event]:
    """Every event that follows from `state` without an outside effect, in order."""
    run = state.workflow
    if run is None or not run.open:
        return decide_turn(state, config, ctx)
    out: list[Event] = []
    if state.active is not None:
        out = decide_turn(state, config, ctx)  # a chat turn finishes before the run starts
        state = fold(state, out)
    while step := _next_step(state, config, ctx):
        out.extend(step)
        state = fold(state, step)
    return out


def lane_config(config: TurnConfig, run: WorkflowRun, ex: StageRun) -> TurnConfig:
    """The turn configuration of one stage execution: its prompt, envelope and bound."""
    stage = run.definition.stages[ex.stage_id]
    spec = StageSpec(
        run_id=run.run_id,
        stage_id=stage.id,
        execution_id=ex.execution_id,
        allowed_tools=stage.allowed_tools,
        completion_tool=stage.completion_tool,
        completion_schema=stage.completion_schema,
        turn_cap=stage.turn_cap,
    )
    return with_changes(config, stage=spec, system_prompt=ex.system, stage_hooks=frozenset())


def turn_views(state: SessionState, config: TurnConfig) -> list[tuple[SessionState, TurnConfig]]:
    """Each live turn of the session with its configuration: the chat turn, stage turns."""
    views = [(state, config)] if state.active is not None else []
    run = state.workflow
    if run is not None:
        for ex in run.executions:
            if ex.status == "act" and ex.lane.active is not None:
                views.append((ex.lane, lane_config(config, run, ex)))
    return views


def lane_step(
    state: SessionState,
    turn_id: str,
    config: TurnConfig,
    ctx: Context,
    step: Callable[[SessionState, TurnConfig], list[Event]],
) -> list[Event]:
    """Apply a turn-level step (a provider result, hook verdicts) to the turn `turn_id`,
    the chat turn or a stage's, then decide what follows for the whole session."""
    run = state.workflow
    ex = run.lane_of(turn_id) if run is not None else None
    if ex is None or run is None:
        if state.active is None or state.active.turn_id != turn_id:
            return []
        events = step(state, config)
    elif ex.status != "act":
        return []
    else:
        events = step(ex.lane, lane_config(config, run, ex))
    if not events:
        return []
    return events + decide(fold(state, events), config, ctx)


def awaiting_workflow_hooks(
    state: SessionState, config: TurnConfig, now: datetime
) -> list[tuple[str, StageRun]]:
    """Gates and asserts the shell must run now (only when such hooks exist)."""
    run = state.workflow
    if run is None or not run.open or run.interrupt == "hard":
        return []
    now_waiting: list[tuple[str, StageRun]] = []
    for ex in run.executions:
        if not ex.running or (ex.wait_until is not None and now < ex.wait_until):
            continue
        if ex.status == "gate" and GATE in config.workflow_hooks:
            now_waiting.append((GATE, ex))
        turn = ex.lane.active
        if (
            ex.status == "act"
            and turn is not None
            and turn.act_done
            and ASSERT in config.workflow_hooks
        ):
            now_waiting.append((ASSERT, ex))
    return now_waiting


def next_wakeup(state: SessionState, now: datetime) -> datetime | None:
    """When the next deferred gate or retry backoff ends (the shell sets a timer)."""
    run = state.workflow
    if run is None or not run.open:
        return None
    times = [
        ex.wait_until
        for ex in run.executions
        if ex.running and ex.wait_until is not None and ex.wait_until > now
    ]
    return min(times) if times else None


def on_gate(
    state: SessionState,
    execution_id: str,
    outcome: Literal["pass", "defer", "block"],
    config: TurnConfig,
    ctx: Context,
    *,
    gate: str | None = None,
    reason: str | None = None,
) -> list[Event]:
    """Record a gate's answer; `resolutionPolicy` says what defer and block do."""
    run = state.workflow
    ex = run.lane_of(execution_id) if run is not None else None
    if run is None or ex is None or ex.status != "gate":
        return []
    events = _gate_events(run, ex, outcome, ctx, gate=gate, reason=reason)
    return events + decide(fold(state, events), config, ctx)


def on_assert(
    state: SessionState,
    execution_id: str,
    verdict: Literal["ok", "retry", "fail"],
    config: TurnConfig,
    ctx: Context,
    *,
    asserter: str | None = None,
    reason: str | None = None,
) -> list[Event]:
    """Record an assert hook's verdict and what follows (Act again, or Exit)."""
    run = state.workflow
    ex = run.lane_of(execution_id) if run is not None else None
    if run is None or ex is None or ex.status != "act":
        return []
    turn = ex.lane.active
    if turn is None or not turn.act_done:
        return []
    events = _assert_events(run, ex, verdict, reason, ctx, asserter=asserter)
    return events + decide(fold(state, events), config, ctx)


def _next_step(state: SessionState, config: TurnConfig, ctx: Context) -> list[Event]:
    run = state.workflow
    assert run is not None
    if not run.open:
        return decide_turn(state, config, ctx) if state.active is None else []
    parked = _park_inputs(state, run, ctx)
    if parked:
        return parked
    if run.status == "attached":
        if state.active is not None:
            return []
        return _enter_step(state, run, 0, (), ctx)
    repaired = _repair(state, run, ctx)
    if repaired:
        return repaired
    if run.interrupt == "hard":
        running = [ex for ex in run.executions if ex.running]
        if running:
            return _cancel(state, run, running, "interrupted", "hard interrupt", ctx)
        return [_exit_run(state, run, "cancelled", "interrupted", "hard interrupt", ctx)]
    for ex in run.executions:
        if ex.running:
            events = _advance(state, run, ex, config, ctx)
            if events:
                return events
    return _after_executions(state, run, ctx)


def _park_inputs(state: SessionState, run: WorkflowRun, ctx: Context) -> list[Event]:
    """Messages that arrive while the run goes on wait for it (FollowUpQueued)."""
    if state.active is not None:
        return []
    events: list[Event] = []
    for p in state.pending:
        if p.queued:
            continue
        b = Builder(state.session_id, _pseudo_turn(run, p.turn_id, p.input_id), ctx)
        data = FollowUpQueuedData(input_id=p.input_id, behind_turn_id=run.run_id)
        events.append(b.make(FollowUpQueued, data))
    return events


def _advance(
    state: SessionState, run: WorkflowRun, ex: StageRun, config: TurnConfig, ctx: Context
) -> list[Event]:
    if ex.wait_until is not None and ctx.now < ex.wait_until:
        return []
    if ex.status == "gate":
        if GATE in config.workflow_hooks:
            return []  # the shell asks the gate, then `on_gate`
        return _gate_events(run, ex, "pass", ctx)
    turn = ex.lane.active
    if turn is None:  # the stage's turn ended on its own: a provider error, a bound
        reason = f"the stage turn failed: {ex.failure or 'it ended'}"
        return _exit_events(run, ex, _result(run, ex, "fail", reason), ctx, run.last_event_id)
    if turn.ended is not None:
        return decide_turn(ex.lane, lane_config(config, run, ex), ctx)
    if ex.asserted is not None:  # Assert is recorded, its Exit was not (a crash between)
        result = _result(run, ex, ex.asserted, ex.assert_reason)
        return _exit_events(run, ex, result, ctx, turn.last_event_id)
    if turn.act_done:
        if ASSERT in config.workflow_hooks:
            return []  # the shell asks the assert hook, then `on_assert`
        if ex.parsed is not None and not ex.cap_hit:
            return _assert_events(run, ex, "ok", None, ctx)
        cap = run.definition.stages[ex.stage_id].turn_cap
        reason = f"turnCap={cap} rounds passed without a valid {_stage(run, ex).completion_tool}"
        return _assert_events(run, ex, "fail", reason, ctx)
    return decide_turn(ex.lane, lane_config(config, run, ex), ctx)


def _gate_events(
    run: WorkflowRun,
    ex: StageRun,
    outcome: Literal["pass", "defer", "block"],
    ctx: Context,
    *,
    gate: str | None = None,
    reason: str | None = None,
) -> list[Event]:
    b = _lane_builder(run, ex, ctx)
    checks = ex.gate_checks + 1
    policy = _stage(run, ex).resolution_policy
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
        result = _result(run, ex, "skip", why)
    else:
        tries = f" after {checks} checks" if policy == "retry-later" else ""
        result = _result(run, ex, "fail", why + tries)
    return events + _exit_events(run, ex, result, ctx, b.last_id)


def _assert_events(
    run: WorkflowRun,
    ex: StageRun,
    verdict: Literal["ok", "retry", "fail"],
    reason: str | None,
    ctx: Context,
    *,
    asserter: str | None = None,
) -> list[Event]:
    policy = _stage(run, ex).retry_policy
    if verdict == "retry" and ex.attempt >= policy.max_attempts:
        verdict = "fail"
        reason = f"{reason or 'retry asked'}; no attempts left (maxAttempts={policy.max_attempts})"
    retry_at = None
    if verdict == "retry" and policy.delay(ex.attempt + 1) > 0:
        retry_at = ctx.now + timedelta(seconds=policy.delay(ex.attempt + 1))
    turn = ex.lane.active
    assert turn is not None
    b = Builder(_session_of(ex), turn, ctx)
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
    result = _result(run, ex, verdict, reason)
    return events + _exit_events(run, ex, result, ctx, b.last_id)


def _session_of(ex: StageRun) -> str:
    return ex.lane.session_id


def _result(
    run: WorkflowRun, ex: StageRun, verdict: Literal["ok", "fail", "skip"], reason: str | None
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


def _exit_events(
    run: WorkflowRun, ex: StageRun, result: StageResult, ctx: Context, last_id: str
) -> list[Event]:
    """StageExited, then the end of the stage's turn (if it is still open)."""
    turn = ex.lane.active
    pseudo = _pseudo_turn(run, ex.execution_id, ex.execution_id)
    b = Builder(_session_of(ex), turn or pseudo, ctx)
    b.last_id = last_id
    data = StageExitedData(stage=ex.stage_id, stage_execution_id=ex.execution_id, result=result)
    return [b.make(StageExited, data), *_end_lane(b, ex, result)]


def _end_lane(b: Builder, ex: StageRun, result: StageResult | None) -> list[Event]:
    """Close the stage's turn: its one TurnEnded (unless it has it), then SessionTurnEnd.
    `result` None: the stage was cancelled."""
    turn = ex.lane.active
    if turn is None:
        return []
    ok = result is not None and result.verdict in ("ok", "skip")
    events: list[Event] = []
    if turn.ended is None:
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


def _cancel(
    state: SessionState,
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
        turn = ex.lane.active
        b = Builder(_session_of(ex), turn or _pseudo_turn(run, ex.execution_id, ""), ctx)
        data = StageCancelledData(
            stage=ex.stage_id, stage_execution_id=ex.execution_id, reason=reason, cause=cause
        )
        events.append(b.make(StageCancelled, data))
        events += _end_lane(b, with_changes(ex, failure=f"{cause}: {reason}"), None)
    return events


def _repair(state: SessionState, run: WorkflowRun, ctx: Context) -> list[Event]:
    """Finish what a decision cut short by a crash began: its first event is durable, the
    rest of it may not be (the runner appends the rest pipelined)."""
    for ex in run.executions:
        turn = ex.lane.active
        if not ex.running and turn is not None:  # exited or cancelled, its turn still open
            b = Builder(_session_of(ex), turn, ctx)
            return _end_lane(b, ex, ex.result)
        if ex.running and turn is None and ex.lane.turns_ended == 0:  # its turn never started
            b = Builder(state.session_id, _pseudo_turn(run, ex.execution_id, ex.execution_id), ctx)
            return _lane_start(b, run, ex.stage_id, ex.execution_id)
    if run.step < 0 or run.interrupt is not None:
        return []
    step, current = run.step_def(), run.current()
    if not step.parallel or any(ex.role != "stage" or not ex.running for ex in current):
        return []
    entered = {ex.stage_id for ex in current}
    events: list[Event] = []
    for stage_id in step.stages:  # a sibling whose entry was lost
        if stage_id not in entered:
            events += _enter(state, run, stage_id, run.step, (), ctx)
    return events


def _after_executions(state: SessionState, run: WorkflowRun, ctx: Context) -> list[Event]:
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
            return _cancel(state, run, others, "ParallelSiblingFailure", why, ctx)
        return []
    recover = next((ex for ex in current if ex.role == "recover"), None)
    if recover is not None:
        if recover.succeeded:
            return _next_workflow_step(state, run, ctx)
        why = f"recover stage {recover.stage_id} failed too: {_why(recover)}"
        return [_exit_run(state, run, "failed", "StageFailed", why, ctx)]
    if failed:
        first = failed[0]
        branch = run.definition.on_fail.get(first.stage_id)
        if branch is not None and run.interrupt is None:
            assert first.result is not None
            return _enter(state, run, branch, run.step, (first.result,), ctx, recovers=first)
        if step.parallel and first.role == "stage":
            kind = "ParallelSiblingFailure"
        elif first.status == "init_failed":
            kind = "StageInitFailed"
        else:
            kind = "StageFailed"
        return [_exit_run(state, run, "failed", kind, f"{first.stage_id}: {_why(first)}", ctx)]
    if step.join is not None and not any(ex.role == "join" for ex in current):
        if run.interrupt is not None:
            return [_exit_run(state, run, "cancelled", "interrupted", "interrupted", ctx)]
        results = _step_results(run, current)
        return _enter(state, run, step.join, run.step, results, ctx)
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
        return [_exit_run(state, run, "cancelled", "interrupted", "interrupted", ctx)]
    nxt = run.step + 1
    if nxt >= len(run.definition.steps):
        return [_exit_run(state, run, "completed", None, None, ctx)]
    return _enter_step(state, run, nxt, _step_results(run, run.current()), ctx)


def _enter_step(
    state: SessionState,
    run: WorkflowRun,
    index: int,
    upstream: tuple[StageResult, ...],
    ctx: Context,
) -> list[Event]:
    step = run.definition.steps[index]
    if not step.parallel:
        return _enter(state, run, step.stages[0], index, upstream, ctx)
    events: list[Event] = []
    for stage_id in step.stages:  # siblings see no upstream
        events += _enter(state, run, stage_id, index, (), ctx)
    return events


def _enter(
    state: SessionState,
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
    b = Builder(state.session_id, _pseudo_turn(run, execution_id, execution_id), ctx)
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
    return [b.make(StageEntered, entered), *_lane_start(b, run, stage_id, execution_id)]


def _lane_start(b: Builder, run: WorkflowRun, stage_id: str, execution_id: str) -> list[Event]:
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


def _exit_run(
    state: SessionState,
    run: WorkflowRun,
    status: Literal["completed", "failed", "cancelled"],
    failure: str | None,
    reason: str | None,
    ctx: Context,
) -> Event:
    b = Builder(state.session_id, _pseudo_turn(run, run.run_id, run.run_id), ctx)
    data = WorkflowExitData(
        run_id=run.run_id,
        workflow=run.name,
        status=status,
        reason=reason,
        failure=failure,
        results=run.results,
    )
    return b.make(WorkflowExit, data)


def _stage(run: WorkflowRun, ex: StageRun) -> StageDef:
    return run.definition.stages[ex.stage_id]


def _lane_builder(run: WorkflowRun, ex: StageRun, ctx: Context) -> Builder:
    turn = ex.lane.active or _pseudo_turn(run, ex.execution_id, ex.execution_id)
    return Builder(_session_of(ex), turn, ctx)


def _pseudo_turn(run: WorkflowRun, turn_id: str, input_id: str) -> ActiveTurn:
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
