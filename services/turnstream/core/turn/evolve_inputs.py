"""The fold of a chat's inputs, its messages to other sessions and its sub-turns: three
event families of `turnstream.core.turn.evolve`.

An input waits (`pending`) until its turn starts, or steers the active turn; a sub-turn's
reply is its result (`subturns`). The session's agent and the replies it owes a rejected
input's sender are the session's (`turnstream.core.session.fold`).
"""

from __future__ import annotations

from typing import assert_never

from turnstream.core.events import (
    FollowUpQueued,
    InputAccepted,
    InterruptReceived,
    MessageDropped,
    MessageSent,
    SteeringInjected,
    SubTurnEnded,
    SubTurnResultDelivered,
    SubTurnSpawned,
)
from turnstream.core.immutable import with_changes
from turnstream.core.turn import subturns
from turnstream.core.turn.changes import call_changed, pending_dropped, turn_changed
from turnstream.core.turn.state import ChatState, ChildResult, PendingInput

INTERRUPT_INPUT = "interrupt:"
"""`SteeringInjected.inputId` prefix of a graceful interrupt's request to summarise."""


def evolve_input(
    state: ChatState,
    event: InputAccepted | FollowUpQueued | SteeringInjected | InterruptReceived,
) -> ChatState:
    match event:
        case InputAccepted():
            return _accepted(state, event)
        case FollowUpQueued(data=data):
            pending = tuple(
                with_changes(p, queued=True) if p.input_id == data.input_id else p
                for p in state.pending
            )
            return with_changes(state, pending=pending)
        case SteeringInjected(data=data):
            state = pending_dropped(state, data.input_id)
            if state.active is None:
                return state
            asked = state.active.summary_asked or data.input_id.startswith(INTERRUPT_INPUT)
            steering = (*state.active.steering, data.text)
            return turn_changed(state, event, steering=steering, summary_asked=asked)
        case InterruptReceived():
            return _interrupted(state, event)
        case _:
            assert_never(event)


def _accepted(state: ChatState, event: InputAccepted) -> ChatState:
    """An input waits for its turn, unless it is a sub-turn's reply: its result then."""
    data = event.data
    pending = PendingInput(
        input_id=event.id,
        turn_id=event.turn_id or event.id,
        chat_id=event.chat_id,
        trace_id=event.trace_id,
        correlation_id=event.correlation_id,
        kind=data.kind,
        text=data.text,
        sender=data.sender,
        reply_to=data.reply_to,
        key=data.idempotency_key,
        hops=data.hops,
        depth=data.parent.depth if data.parent is not None else 0,
        budget=data.parent.budget if data.parent is not None else None,
    )
    child = subturns.child_for_reply(state, data.in_reply_to)
    early = child is None and subturns.spawning(state, data.in_reply_to)
    if child is None and not early:
        return with_changes(state, pending=(*state.pending, pending))
    outcome = data.outcome
    result = ChildResult(
        status=outcome.status if outcome is not None else "completed",
        failure=outcome.failure_class if outcome is not None else None,
        reply=data.text,
        child_turn_id=outcome.turn_id if outcome is not None else None,
        input=pending,
    )
    if child is None:
        assert data.in_reply_to is not None
        return subturns.replied_early(state, data.in_reply_to, result)
    return subturns.replied(state, child, result)


def _interrupted(state: ChatState, event: InterruptReceived) -> ChatState:
    current = state.active
    if current is None or current.ended or current.interrupt is not None:
        return state  # nothing to interrupt, or already interrupted
    data = event.data
    sender = f"{data.sender.kind}:{data.sender.id}"
    interrupt = (data.mode, sender, current.iteration)
    state = subturns.interrupted(state, current.turn_id, data.mode)
    return with_changes(state, active=with_changes(current, interrupt=interrupt))


def evolve_message(state: ChatState, event: MessageSent | MessageDropped) -> ChatState:
    """A message to another session went out, or was dropped: the turn's reply, a
    send_message call, a sub-turn's interrupt (a rejection's reply is the session's)."""
    match event:
        case MessageSent(data=sent):
            if sent.kind == "interrupt":
                return subturns.interrupt_sent(state, sent.invocation_id)
            if sent.cause == "replyTo":
                return turn_changed(state, event, reply_settled=True)
            if sent.cause == "send_message" and sent.invocation_id:
                invocation = sent.invocation_id
                return call_changed(state, event, invocation, {"approved"}, status="requested")
            return turn_changed(state, event)
        case MessageDropped(data=dropped):
            if dropped.cause == "replyTo":
                return turn_changed(state, event, reply_settled=True)
            return turn_changed(state, event)
        case _:
            assert_never(event)


def evolve_subturn(
    state: ChatState, event: SubTurnSpawned | SubTurnEnded | SubTurnResultDelivered
) -> ChatState:
    match event:
        case SubTurnSpawned(data=data):
            state = subturns.spawned(state, event)
            return call_changed(state, event, data.invocation_id, {"approved"}, status="requested")
        case SubTurnEnded():
            return subturns.ended(state, event)
        case SubTurnResultDelivered():
            return subturns.delivered(state, event)
        case _:
            assert_never(event)
