"""The fold of a chat's inputs, its messages to other sessions and its sub-turns: three
event families of `turnstream.core.turn.evolve`.

An input waits (`pending`) until its turn starts, or steers the active turn. A sub-turn's
reply and the children are the session's (`turnstream.core.session.subturns`), as are its
agent and the replies it owes a rejected input's sender (`turnstream.core.session.fold`).
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
from turnstream.core.turn.changes import call_changed, pending_without, turn_changed
from turnstream.core.turn.state import ChatState, Interrupt, PendingInput

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
            left = {"pending": pending_without(state, data.input_id)}
            if state.active is None:
                return with_changes(state, **left)
            asked = state.active.summary_asked or data.input_id.startswith(INTERRUPT_INPUT)
            steering = (*state.active.steering, data.text)
            return turn_changed(state, event, left, steering=steering, summary_asked=asked)
        case InterruptReceived():
            return _interrupted(state, event)
        case _:
            assert_never(event)


def _accepted(state: ChatState, event: InputAccepted) -> ChatState:
    """An input waits for its turn (a sub-turn's reply is the session's, its child's result:
    `turnstream.core.session.subturns`)."""
    return with_changes(state, pending=(*state.pending, pending_input(event)))


def pending_input(event: InputAccepted) -> PendingInput:
    """The input as it waits for its turn."""
    data = event.data
    return PendingInput(
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
        attachments=tuple(data.attachments or ()),
    )


def _interrupted(state: ChatState, event: InterruptReceived) -> ChatState:
    current = state.active
    if current is None or current.end or current.interrupt is not None:
        return state  # nothing to interrupt, or already interrupted
    data = event.data
    sender = f"{data.sender.kind}:{data.sender.id}"
    interrupt = Interrupt(data.mode, sender, current.iteration)
    return with_changes(state, active=with_changes(current, interrupt=interrupt))


def evolve_message(state: ChatState, event: MessageSent | MessageDropped) -> ChatState:
    """A message to another session went out, or was dropped: the turn's reply, a
    send_message call, a sub-turn's interrupt (a rejection's reply is the session's)."""
    match event:
        case MessageSent(data=sent):
            if sent.kind == "interrupt":
                return state  # to a sub-turn: the session's (`turnstream.core.session.subturns`)
            if sent.cause == "replyTo":
                return reply_settled(state, event)
            if sent.cause == "send_message" and sent.invocation_id:
                invocation = sent.invocation_id
                return call_changed(state, event, invocation, {"approved"}, status="requested")
            return turn_changed(state, event)
        case MessageDropped(data=dropped):
            if dropped.cause == "replyTo":
                return reply_settled(state, event)
            return turn_changed(state, event)
        case _:
            assert_never(event)


def reply_settled(state: ChatState, event: MessageSent | MessageDropped) -> ChatState:
    """The ended turn's reply is recorded: it may close."""
    turn = state.active
    if turn is None or turn.end is None:
        return turn_changed(state, event)
    return turn_changed(state, event, phase=with_changes(turn.end, reply_settled=True))


def evolve_subturn(
    state: ChatState, event: SubTurnSpawned | SubTurnEnded | SubTurnResultDelivered
) -> ChatState:
    """The chat's part of a sub-turn: its spawn call is requested. The children are the
    session's (`turnstream.core.session.subturns`), which folds the rest."""
    match event:
        case SubTurnSpawned(data=data):
            return call_changed(state, event, data.invocation_id, {"approved"}, status="requested")
        case SubTurnEnded() | SubTurnResultDelivered():
            return state
        case _:
            assert_never(event)
