"""The workflow run as a fold: its own events, and every other event routed to the
stage turn (lane) it belongs to, or to the chat."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from turnstream.core.approval import session_mode
from turnstream.core.costs import Tokens, add_spent, model_key
from turnstream.core.events import (
    Envelope,
    Event,
    EventBase,
    InputAccepted,
    InputRejected,
    InterruptReceived,
    MessageDropped,
    MessageSent,
    ProviderRequestCompleted,
    SessionConfigured,
    SessionTurnEnd,
    StageAssertOutcome,
    StageCancelled,
    StageCheckGateResult,
    StageCompletionChecked,
    StageEntered,
    StageExited,
    StageInitFailed,
    StageResult,
    SubTurnEnded,
    SubTurnResultDelivered,
    SubTurnSpawned,
    ToolCallModeInvoked,
    TurnEnded,
    WorkflowAttached,
    WorkflowExit,
)
from turnstream.core.immutable import with_changes
from turnstream.core.session import subturns
from turnstream.core.session.state import SessionState, Unanswered
from turnstream.core.turn.changes import is_active
from turnstream.core.turn.evolve import evolve as evolve_turn
from turnstream.core.turn.state import Act, ChatState
from turnstream.core.workflow.definition import WorkflowDef
from turnstream.core.workflow.state import StageRun, WorkflowRun

SESSION_KINDS: frozenset[type] = frozenset(
    {
        SessionConfigured,
        InputRejected,
        MessageSent,
        MessageDropped,
        WorkflowAttached,
        InputAccepted,
        SubTurnSpawned,
        SubTurnEnded,
        SubTurnResultDelivered,
        InterruptReceived,
        SessionTurnEnd,
        ToolCallModeInvoked,
    }
)
"""The kinds the session folds into more than its chat (`evolve`, `_chat`); with no run
attached, any other goes straight to the chat (most of a turn's events)."""


def evolve(state: SessionState, event: Event) -> SessionState:
    """Fold one event into the session: the run's bookkeeping, a stage's lane, or the chat."""
    if state.workflow is None and type(event) not in SESSION_KINDS:
        return with_changes(state, chat=evolve_turn(state.chat, event))
    if isinstance(event, SessionConfigured):  # the first agent named is the session's
        fixed = session_mode(state.security_mode, event)
        agent = event.data if state.agent is None else state.agent
        if agent is state.agent and fixed == state.security_mode:
            return state
        return with_changes(state, agent=agent, security_mode=fixed)
    if isinstance(event, ToolCallModeInvoked) and state.security_mode is None:
        state = with_changes(state, security_mode=event.data.mode)  # and on to its call
    if isinstance(event, InputRejected):
        return _owed(state, event)
    if isinstance(event, MessageSent | MessageDropped) and _settles(state, event):
        left = tuple(u for u in state.unanswered if u.turn_id != event.turn_id)
        return with_changes(state, unanswered=left)
    run = state.workflow
    if isinstance(event, WorkflowAttached):
        if run is not None and run.open:  # one run at a time: the next waits its turn
            return with_changes(state, workflow=with_changes(run, queued=(*run.queued, event)))
        return with_changes(state, workflow=_attached(event))
    if run is None:
        return _chat(state, event)
    changed = _evolve_run(run, event)
    if changed is not None:
        return with_changes(state, workflow=changed)
    ex = run.lane_of(event.turn_id)
    if ex is None:
        if isinstance(event, InterruptReceived) and run.status == "running":
            mode = "hard" if "hard" in (run.interrupt, event.data.mode) else event.data.mode
            run = with_changes(run, interrupt=mode)
            for ex in run.executions:  # each running stage turn hears it too (mid-Act)
                if ex.running and ex.lane.active is not None:
                    run = _replace(run, with_changes(ex, lane=evolve_turn(ex.lane, event)))
            state = with_changes(state, workflow=run)
        return _chat(state, event)
    lane = evolve_turn(ex.lane, event)
    failure = ex.failure
    if isinstance(event, TurnEnded) and ex.running and event.data.status != "completed":
        failure = event.data.reason or event.data.status
    if isinstance(event, ProviderRequestCompleted) and lane is not ex.lane:
        key, used = model_key(event.data.provider, event.data.model), Tokens.of(event.data.usage)
        state = with_changes(state, stage_spent=add_spent(state.stage_spent, key, used))
    return with_changes(state, workflow=_replace(run, with_changes(ex, lane=lane, failure=failure)))


def evolve_all(state: SessionState, events: Iterable[Event]) -> SessionState:
    """`evolve` of each event in order, with one copy of the session per run of events that
    only its chat takes (no run attached, not a `SESSION_KINDS` event: most of a turn's)
    instead of one per event: they are folded into the chat, then the session rebuilt."""
    chat = state.chat  # ahead of `state` by the chat's events since the last rebuild
    for event in events:
        if state.workflow is None and type(event) not in SESSION_KINDS:
            chat = evolve_turn(chat, event)
            continue
        if chat is not state.chat:
            state = with_changes(state, chat=chat)
        state = evolve(state, event)
        chat = state.chat
    return state if chat is state.chat else with_changes(state, chat=chat)


fold = evolve_all
"""The session's fold (`turnstream.core.fold.projector`'s contract: `evolve` of each event
in order), batched (`evolve_all`)."""


def _chat(state: SessionState, event: Event) -> SessionState:
    """The event folded into the session's chat, and into its sub-turns (`subturns`): a
    child's reply, end and delivery are theirs alone; a spawn, an interrupt and a turn's
    close are the chat's too."""
    closing = False
    match event:
        case InputAccepted():
            answered = subturns.answered(state, event)
            if answered is not None:
                return answered
        case MessageSent(data=data) if data.kind == "interrupt":
            return subturns.interrupt_sent(state, data.invocation_id)
        case MessageDropped(data=data) if data.reason == "refused" and (
            subturns.find_child(state, data.invocation_id) is not None
        ):
            return subturns.interrupt_sent(state, data.invocation_id)  # a refused interrupt
        case SubTurnEnded():
            return subturns.ended(state, event)
        case SubTurnResultDelivered():
            return subturns.delivered(state, event)
        case SubTurnSpawned():
            state = subturns.spawned(state, event)
        case InterruptReceived():
            state = subturns.parent_interrupted(state, event)
        case SessionTurnEnd():
            closing = is_active(state.chat, event)
    state = with_changes(state, chat=evolve_turn(state.chat, event))
    return subturns.orphans_kept(state) if closing and state.early else state


def _owed(state: SessionState, event: InputRejected) -> SessionState:
    """A rejected input whose sender wants a reply: the rejection is owed to it, once."""
    data = event.data
    if data.reply_to is None or not event.turn_id:
        return state
    if any(u.turn_id == event.turn_id for u in state.unanswered):
        return state
    unanswered = Unanswered(
        turn_id=event.turn_id,
        reply_to=data.reply_to,
        key=data.idempotency_key or "",
        hops=data.hops,
        reason=data.reason,
        envelope=Envelope.of(event),
        event_id=event.id,
    )
    return with_changes(state, unanswered=(*state.unanswered, unanswered))


def _settles(state: SessionState, event: MessageSent | MessageDropped) -> bool:
    """The event is the reply a rejected input's sender was owed (sent, or dropped)."""
    owed = event.data.cause == "replyTo"
    return owed and any(u.turn_id == event.turn_id for u in state.unanswered)


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
                lane=ChatState(event.session_id),
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
                lane=ChatState(event.session_id),
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
        case StageCompletionChecked():
            return _act_checked(run, event)
        case StageAssertOutcome():
            return _asserted(run, event)
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


def _act_checked(run: WorkflowRun, event: StageCompletionChecked) -> WorkflowRun:
    """The completion channel judged a stage's response: its result, or its Act's end."""
    data = event.data
    checked = run.lane_of(data.stage_execution_id)
    if checked is None:
        return run
    parsed = data.parsed if data.outcome == "accepted" else checked.parsed
    lane = evolve_turn(checked.lane, event)
    capped = data.outcome == "cap_hit"
    act = checked.act
    if is_active(checked.lane, event):
        done = data.outcome in ("accepted", "cap_hit", "interrupted")
        act = Act(act.start, data.iteration, done)
    changes = {"lane": lane, "parsed": parsed, "cap_hit": capped, "act": act}
    return _replace(run, with_changes(checked, **changes))


def _asserted(run: WorkflowRun, event: StageAssertOutcome) -> WorkflowRun:
    """Assert's verdict on a stage: final (Exit follows), or Act again."""
    data = event.data
    asserted = run.lane_of(data.stage_execution_id)
    if asserted is None:
        return run
    lane = evolve_turn(asserted.lane, event)
    if data.verdict != "retry":
        final = with_changes(asserted, lane=lane, asserted=data.verdict, assert_reason=data.reason)
        return _replace(run, final)
    act = asserted.act
    turn = asserted.lane.active
    if turn is not None and is_active(asserted.lane, event):
        act = Act(turn.iteration, act.checked, False)  # Act again from this round
    retried = with_changes(
        asserted,
        lane=lane,
        act=act,
        attempt=data.attempt + 1,
        wait_until=data.retry_at,
        parsed=None,
        cap_hit=False,
    )
    return _replace(run, retried)


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
