"""Changing a chat as its events are folded (`turnstream.core.turn.evolve`): the active
turn (each change only while the event's turn is the active one), its calls, its pending
inputs."""

from __future__ import annotations

from collections.abc import Mapping

from turnstream.core.events import EventBase
from turnstream.core.immutable import with_changes
from turnstream.core.turn.state import ChatState, PendingInput

NO_CHANGES: Mapping[str, object] = {}


def is_active(state: ChatState, event: EventBase) -> bool:
    """The event is of the chat's active turn."""
    return state.active is not None and state.active.turn_id == event.turn_id


def turn_changed(
    state: ChatState, event: EventBase, chat: Mapping[str, object] = NO_CHANGES, **changes: object
) -> ChatState:
    """The active turn with `changes`, and `event` as its last (if it is the event's turn),
    in a chat with `chat` (changes to its own fields, made whichever turn is active): one
    copy of the chat for both."""
    if not is_active(state, event):
        return with_changes(state, **chat) if chat else state
    assert state.active is not None
    turn = with_changes(state.active, last_event_id=event.id, **changes)
    return with_changes(state, active=turn, **chat)


def call_changed(
    state: ChatState,
    event: EventBase,
    invocation_id: str,
    from_status: frozenset[str] | set[str],
    **changes: object,
) -> ChatState:
    """Move one call of the active turn on, if it is in one of `from_status` (idempotent)."""
    if not is_active(state, event):
        return state
    assert state.active is not None
    calls = state.active.calls
    for i, call in enumerate(calls):
        if call.invocation_id == invocation_id:
            if call.status not in from_status:
                return state
            moved = with_changes(call, **changes)
            return turn_changed(state, event, calls=(*calls[:i], moved, *calls[i + 1 :]))
    return state


def denied(text: str) -> dict[str, object]:
    """A call's changes when it is denied, `text` saying why (its result)."""
    return {"status": "denied", "result": text, "is_error": True}


def joined(round_reply: tuple[str, str], text: str) -> str:
    """The turn's reply before this round, joined with the round's text."""
    before, separator = round_reply
    return before + separator + text if before and text else before + text


def pending_without(state: ChatState, input_id: str) -> tuple[PendingInput, ...]:
    """The chat's pending inputs but `input_id` (its turn started, or it steered one)."""
    return tuple(p for p in state.pending if p.input_id != input_id)
