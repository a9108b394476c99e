"""`evolve(state, event)`: fold one event into a chat's state (the session's chat, or a
workflow stage's lane), by the family the event is of:

    inputs        InputAccepted (a pending input, or a sub-turn's reply), FollowUpQueued,
                  SteeringInjected, InterruptReceived (`evolve_inputs`, with the next two;
                  SessionConfigured and InputRejected are the session's)
    messages      MessageSent, MessageDropped (a reply, a send_message, an interrupt)
    sub-turns     SubTurnSpawned (the call is requested; the children are the session's:
                  `turnstream.core.session.subturns`)
    the turn      SessionTurnStart → StagePreFired / StagePostFired … → RenderEmitted →
                  TurnEnded → SessionTurnEnd (the turn is gone: the next may start); a
                  StagePreFired with `previous` is that stage's StagePostFired, then itself
    context       ContextProvided, ContextSkipped, ContextCompacted
    the model     ProviderRequestStarted → ProviderRequestCompleted | ProviderRequestFailed,
                  ProviderFallback
    tool calls    proposed → approved → requested → succeeded | failed | cancelled, or
                  denied; HookDecided (`evolve_tools`)
    a stage       StageCompletionChecked, StageAssertOutcome (the run's other events are
                  `turnstream.core.session`'s; a stage's Act is its stage's: `StageRun.act`)

(context, the model and a stage: `evolve_model`)

Each family's function matches its events to the end (`assert_never`), and so does
`_family`, which finds the family of each kind once for `evolve`: an event type that no
family takes fails the type checker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, assert_never

from turnstream.core.events import (
    AuditViolation,
    ContextCompacted,
    ContextProvided,
    ContextSkipped,
    Event,
    FollowUpQueued,
    HookDecided,
    InputAccepted,
    InputRejected,
    InteractionAnswered,
    InteractionRequested,
    InterruptReceived,
    MessageDropped,
    MessageSent,
    ProviderFallback,
    ProviderRequestCompleted,
    ProviderRequestFailed,
    ProviderRequestStarted,
    ProviderRetry,
    PushNotificationAbandoned,
    RenderEmitted,
    SessionConfigured,
    SessionTurnEnd,
    SessionTurnStart,
    Stage,
    StageAssertOutcome,
    StageCancelled,
    StageCheckGateResult,
    StageCompletionChecked,
    StageEntered,
    StageExited,
    StageGranted,
    StageInitFailed,
    StagePostFired,
    StagePreFired,
    SteeringInjected,
    SubTurnEnded,
    SubTurnResultDelivered,
    SubTurnSpawned,
    ToolCallApproved,
    ToolCallDenied,
    ToolCallModeInvoked,
    ToolInvocationCancelled,
    ToolInvocationFailed,
    ToolInvocationProposed,
    ToolInvocationRequested,
    ToolInvocationStarted,
    ToolInvocationSucceeded,
    TurnEnded,
    TurnEndedData,
    WorkflowAttached,
    WorkflowExit,
)
from turnstream.core.fold import projector
from turnstream.core.immutable import with_changes
from turnstream.core.turn.changes import is_active, pending_without, turn_changed
from turnstream.core.turn.evolve_inputs import evolve_input, evolve_message, evolve_subturn
from turnstream.core.turn.evolve_model import evolve_context, evolve_provider, evolve_stage
from turnstream.core.turn.evolve_tools import evolve_call, evolve_hook
from turnstream.core.turn.phases import (
    AwaitingModel,
    CallingTools,
    Ended,
    ModelFailed,
    Phase,
    Receiving,
    Rendering,
    Requesting,
    Responded,
    closed,
    opened,
)
from turnstream.core.turn.state import (
    ActiveTurn,
    CallStatus,
    ChatState,
    Message,
)

Family = Callable[[ChatState, Any], ChatState]
"""A family's fold (`_family` says which events it takes)."""


def evolve(state: ChatState, event: Event) -> ChatState:
    """Fold one event into the chat's state, by the family it is of."""
    kind = type(event)
    family = _FAMILIES.get(kind)
    if family is None:
        family = _FAMILIES[kind] = _family(event)
    return family(state, event)


def _unchanged(state: ChatState, event: Event) -> ChatState:
    return state


def _family(event: Event) -> Family:
    """The fold of the family `event` is of (each case is a class pattern: the kind alone
    decides, so `evolve` asks once per kind instead of matching every event)."""
    match event:
        case InputAccepted() | FollowUpQueued() | SteeringInjected() | InterruptReceived():
            return evolve_input
        case MessageSent() | MessageDropped():
            return evolve_message
        case SubTurnSpawned() | SubTurnEnded() | SubTurnResultDelivered():
            return evolve_subturn
        case (
            SessionTurnStart()
            | StagePreFired()
            | StagePostFired()
            | RenderEmitted()
            | TurnEnded()
            | SessionTurnEnd()
        ):
            return _lifecycle
        case ContextProvided() | ContextSkipped() | ContextCompacted():
            return evolve_context
        case (
            ProviderRequestStarted()
            | ProviderRequestCompleted()
            | ProviderFallback()
            | ProviderRequestFailed()
        ):
            return evolve_provider
        case (
            ToolInvocationProposed()
            | ToolCallModeInvoked()
            | ToolCallApproved()
            | ToolCallDenied()
            | ToolInvocationRequested()
            | ToolInvocationSucceeded()
            | ToolInvocationFailed()
            | ToolInvocationCancelled()
        ):
            return evolve_call
        case HookDecided():
            return evolve_hook
        case StageCompletionChecked() | StageAssertOutcome():
            return evolve_stage
        case (
            WorkflowAttached()
            | StageEntered()
            | StageInitFailed()
            | StageCheckGateResult()
            | StageGranted()
            | StageCancelled()
            | StageExited()
            | WorkflowExit()
        ):
            return _unchanged  # the run's own bookkeeping: `turnstream.core.session.run`
        case SessionConfigured() | InputRejected():
            # the session's agent and replies owed: `turnstream.core.session.fold`
            return _unchanged
        case (
            ProviderRetry()
            | InteractionRequested()
            | InteractionAnswered()
            | ToolInvocationStarted()
            | AuditViolation()
            | PushNotificationAbandoned()
        ):
            return _unchanged
        case _:
            assert_never(event)


_FAMILIES: dict[type, Family] = {}
"""Each event kind's family fold, as `_family` finds it (the first event of a kind asks)."""


# -- the turn's life ----------------------------------------------------------------------


def _lifecycle(
    state: ChatState,
    event: SessionTurnStart
    | StagePreFired
    | StagePostFired
    | RenderEmitted
    | TurnEnded
    | SessionTurnEnd,
) -> ChatState:
    match event:
        case SessionTurnStart():
            return _started(state, event)
        case StagePreFired(data=data):
            if not is_active(state, event):
                return state
            history = state.history
            changes: dict[str, object] = {}
            assert state.active is not None
            phase: Phase = state.active.phase
            if data.previous is not None:  # it stands for the stage's StagePostFired too
                history, changes = _left(state, data.previous.stage)
                phase = _closed_in(phase, data.previous.stage)
            if data.stage is Stage.COMPOSE_REQUEST and state.active.steering:
                steered = tuple(Message("user", text) for text in state.active.steering)
                history += steered
                changes["steering"] = ()
            changes.update(phase=_entered(phase, data.stage), iteration=data.iteration)
            # one copy of the chat and the turn for all the event changes (it may stand
            # for two events)
            return turn_changed(state, event, _history(state, history), **changes)
        case StagePostFired(data=data):
            if not is_active(state, event):
                return state
            history, changes = _left(state, data.stage)
            return turn_changed(state, event, _history(state, history), **changes)
        case RenderEmitted():
            turn = state.active
            if turn is None or not isinstance(turn.phase, Rendering):
                return turn_changed(state, event)
            return turn_changed(state, event, phase=Rendering(turn.phase.open, rendered=True))
        case TurnEnded(data=data):
            # not the active turn's: e.g. the gateway's terminal event for rejected input
            if not is_active(state, event):
                return state
            assert state.active is not None
            return turn_changed(state, event, phase=_ended(state.active.phase, data))
        case SessionTurnEnd():
            return _closed(state, event)
        case _:
            assert_never(event)


def _left(state: ChatState, stage: Stage) -> tuple[tuple[Message, ...], dict[str, object]]:
    """The chat's history, and the changes to its active turn, as the turn leaves `stage`
    (a `StagePostFired`, or the `previous` a `StagePreFired` carries)."""
    history = state.history
    changes: dict[str, object] = {}
    if stage is Stage.TOOL_CALL:
        history += _tool_results(state)
        changes["calls"] = ()
    if stage is Stage.COMPOSE_REQUEST:
        changes["context_gathered"] = True
    assert state.active is not None
    changes["phase"] = _closed_in(state.active.phase, stage)
    return history, changes


def _history(state: ChatState, history: tuple[Message, ...]) -> dict[str, object]:
    """The chat's changes when its history is `history`."""
    return {} if history is state.history else {"history": history}


def _entered(phase: Phase, stage: Stage) -> Phase:
    """The phase a `StagePreFired` of `stage` moves the turn to (the round's response, or
    the calls it asks for, carried into it)."""
    # `type() is` rather than a match with class patterns: this runs for every stage event
    if type(phase) is Ended:
        return phase
    if type(phase) is AwaitingModel:
        if stage is Stage.STREAM_RESPONSE:  # a tool call streamed complete opened it
            return AwaitingModel(stage, change=phase.change)
    elif type(phase) is Requesting:
        if stage is Stage.STREAM_RESPONSE and phase.response is not None:
            return Responded(response=phase.response)
    elif type(phase) is Responded:
        if stage is Stage.TOOL_CALL and phase.response is not None:
            return CallingTools(asked=phase.response.calls)
    return opened(stage)


def _closed_in(phase: Phase, stage: Stage) -> Phase:
    """The phase a `StagePostFired` of `stage` leaves the turn in."""
    match phase:
        case Ended():
            return phase
        case AwaitingModel():
            return AwaitingModel(stage, open=False, change=phase.change)
        case ModelFailed():
            return with_changes(phase, stage=stage, open=False)
        case Rendering() if stage is Stage.RENDER:
            return Rendering(open=False, rendered=phase.rendered)
        case Requesting() if stage is Stage.SEND_REQUEST and phase.response is not None:
            return Requesting(open=False, response=phase.response)
        case Responded() if stage is Stage.STREAM_RESPONSE and phase.response is not None:
            return Responded(open=False, response=phase.response)
    return closed(stage)


def _ended(phase: Phase, data: TurnEndedData) -> Ended:
    """The turn's end (a repeated `TurnEnded` keeps its reply's settling)."""
    settled = isinstance(phase, Ended) and phase.reply_settled
    rendered = isinstance(phase, Rendering | Ended) and phase.rendered
    return Ended(
        data.status, phase.stage, data.failure_class, data.reason, settled, rendered=rendered
    )


def _started(state: ChatState, event: SessionTurnStart) -> ChatState:
    data = event.data
    started = next((p for p in state.pending if p.input_id == data.input_id), None)
    attached = started.attachments if started else ()
    turn = ActiveTurn(
        turn_id=event.turn_id or data.input_id,
        input_id=data.input_id,
        chat_id=event.chat_id,
        trace_id=event.trace_id,
        correlation_id=event.correlation_id,
        reply_to=started.reply_to if started else None,
        last_event_id=event.id,
        input_key=started.key if started else "",
        hops=started.hops if started else 0,
        depth=started.depth if started else 0,
        budget=started.budget if started else None,
        started_at=event.time,
        phase=Receiving(open=False),
        history_start=len(state.history),
    )
    return with_changes(
        state,
        pending=pending_without(state, data.input_id),
        active=turn,
        history=(*state.history, Message("user", data.text, attachments=attached)),
        attachments=state.attachments + attached if attached else state.attachments,
    )


def _closed(state: ChatState, event: SessionTurnEnd) -> ChatState:
    if not is_active(state, event):
        return state
    assert state.active is not None
    leftover = tuple(Message("user", text) for text in state.active.steering)
    return with_changes(
        state,
        active=None,
        history=state.history + leftover,
        turns_ended=state.turns_ended + 1,
        last_turn_id=state.active.turn_id,
        last_status=event.data.status,
    )


def _tool_results(state: ChatState) -> tuple[Message, ...]:
    """The round's results, as they join the history: in the model's call order."""
    assert state.active is not None
    return tuple(
        Message("tool", call.result, tool_call_id=call.call_id, is_error=call.is_error)
        for call in sorted(state.active.calls, key=lambda c: c.index)
    )


fold = projector(evolve)

__all__ = ["CallStatus", "evolve", "fold"]
