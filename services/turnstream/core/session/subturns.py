"""Sub-turns as the parent session sees them (DESIGN §11, seed 003): a fold and a step.

    spawn approved ─► SubTurnSpawned + MessageSent (the child's input, `session/outbound.py`)
    child running ──┬─ its reply arrives (InputAccepted inReplyTo the spawn's key)
                    └─ its deadline passes (TURNSTREAM_SUBTURN_DEADLINE_S)
                  ─► SubTurnEnded{status, failureClass?, reply}      (exactly once)
    ended ─► SubTurnResultDelivered{as}                              (exactly once)
        sync,  its turn waits on the call ─► the call's result       as tool_result
        sync,  its turn is over           ─► nobody waits            as dropped
        async, its turn still runs        ─► SteeringInjected        as steering
        async, its turn is over           ─► a new turn's input      as follow_up

A child's second reply (a duplicate, a reply after its deadline) changes nothing: the
child is kept (as `delivered`) so its key is remembered. Pure: the clock is `ctx.now`.

Only the session's own chat spawns (a stage's turn is refused `spawn`), so the children are
the session's (`SessionState.children`); what they say to its chat's turn (a call's
result, steering, a follow-up, an orphaned early reply) goes into the chat.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from turnstream.core.events import (
    Envelope,
    Event,
    EventBase,
    FailureClass,
    InputAccepted,
    InterruptReceived,
    Sender,
    SteeringInjected,
    SteeringInjectedData,
    SubTurnEnded,
    SubTurnEndedData,
    SubTurnResultDelivered,
    SubTurnResultDeliveredData,
    SubTurnSpawned,
    ToolError,
    ToolInvocationFailed,
    ToolInvocationFailedData,
    ToolInvocationSucceeded,
    ToolInvocationSucceededData,
    stamp,
)
from turnstream.core.immutable import with_changes
from turnstream.core.session.state import Child, ChildResult, SessionState
from turnstream.core.turn.evolve_inputs import pending_input
from turnstream.core.turn.phases import Rendering
from turnstream.core.turn.runtime_calls import NONE_SPAWNED, Spawned
from turnstream.core.turn.state import ActiveTurn, Context, PendingInput

SUBTURN_INPUT = "subturn:"
"""`SteeringInjected.inputId` prefix of an async result with no input of its own."""


# -- fold -----------------------------------------------------------------------------


def answered(state: SessionState, event: InputAccepted) -> SessionState | None:
    """An input that is a child's reply, as its result (None: an ordinary input, the
    chat's): kept until `SubTurnEnded` records it, or, before its `SubTurnSpawned` is
    folded, as an early reply."""
    data = event.data
    child = child_for_reply(state, data.in_reply_to)
    if child is None and not spawning(state, data.in_reply_to):
        return None
    pending = pending_input(event)
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
        return replied_early(state, data.in_reply_to, result)
    return replied(state, child, result)


def parent_interrupted(state: SessionState, event: InterruptReceived) -> SessionState:
    """The chat's turn is interrupted (if it runs, and was not already): its running
    children must be too."""
    current = state.chat.active
    if current is None or current.end or current.interrupt is not None:
        return state
    return interrupted(state, current.turn_id, event.data.mode)


def orphans_kept(state: SessionState) -> SessionState:
    """The chat's turn closed: an early reply whose spawn was never recorded has no child
    to go to, so it is kept as an ordinary message (nothing accepted is lost)."""
    orphans = tuple(r.input for _, r in state.early if r.input is not None)
    chat = with_changes(state.chat, pending=state.chat.pending + orphans)
    return with_changes(state, chat=chat, early=())


def spawned_by(state: SessionState) -> Spawned:
    """What the chat's active turn's sub-turns hold (a `spawn` is judged against it)."""
    turn = state.chat.active
    if turn is None or not state.children:  # asked at every step of every turn
        return NONE_SPAWNED
    mine = [c for c in state.children if c.turn_id == turn.turn_id]
    running = sum(1 for c in mine if c.status == "running")
    return Spawned(running=running, used=sum(1 + c.budget for c in mine))


def spawned(state: SessionState, event: SubTurnSpawned) -> SessionState:
    data = event.data
    if find_child(state, data.invocation_id) is not None:
        return state
    child = Child(
        invocation_id=data.invocation_id,
        session_id=data.child_session_id,
        turn_id=event.turn_id or "",
        mode=data.mode,
        key=data.idempotency_key,
        depth=data.depth,
        deadline=event.time + timedelta(seconds=data.deadline_s),
        budget=data.budget,
        spawned_at=event.time,
        envelope=Envelope.of(event),
        last_event_id=event.id,
    )
    turn = state.chat.active
    if turn is not None and turn.turn_id == child.turn_id and turn.interrupt is not None:
        child = with_changes(child, interrupt=turn.interrupt.mode)  # spawned as it was stopped
    early = next((r for k, r in state.early if k == child.key), None)
    if early is not None:  # it answered before this record: its result is here already
        child = with_changes(child, result=early)
        state = with_changes(state, early=tuple(e for e in state.early if e[0] != child.key))
    return with_changes(state, children=(*state.children, child))


def child_for_reply(state: SessionState, in_reply_to: str | None) -> Child | None:
    """The child whose reply an input is (None: an ordinary input)."""
    if in_reply_to is None:
        return None
    return next((c for c in state.children if c.key == in_reply_to), None)


def spawning(state: SessionState, in_reply_to: str | None) -> bool:
    """Whether an input answers a `spawn` call of the active turn not yet recorded as
    spawned (its child answered before the parent's record of it was appended)."""
    turn = state.chat.active
    if in_reply_to is None or turn is None:
        return False
    return any(c.tool == "spawn" and in_reply_to == f"spawn:{c.invocation_id}" for c in turn.calls)


def replied_early(state: SessionState, key: str, result: ChildResult) -> SessionState:
    if any(k == key for k, _ in state.early):
        return state
    return with_changes(state, early=(*state.early, (key, result)))


def replied(state: SessionState, child: Child, result: ChildResult) -> SessionState:
    """A child's reply arrived: kept until `SubTurnEnded` records it (first reply wins)."""
    if child.status != "running" or child.result is not None:
        return state
    return _replace(state, with_changes(child, result=result))


def ended(state: SessionState, event: SubTurnEnded) -> SessionState:
    child = find_child(state, event.data.invocation_id)
    if child is None or child.status != "running":
        return state
    data = event.data
    before = child.result
    result = ChildResult(
        status=data.status,
        failure=data.failure_class,
        reply=data.reply,
        child_turn_id=data.child_turn_id,
        input=before.input if before is not None else None,
    )
    return _replace(
        state, with_changes(child, status="ended", result=result, last_event_id=event.id)
    )


def delivered(state: SessionState, event: SubTurnResultDelivered) -> SessionState:
    child = find_child(state, event.data.invocation_id)
    if child is None or child.status != "ended":
        return state
    state = _replace(state, with_changes(child, status="delivered", last_event_id=event.id))
    if event.data.delivered_as != "follow_up":
        return state
    assert child.envelope is not None
    base = child.result.input if child.result is not None else None
    follow = PendingInput(
        input_id=base.input_id if base is not None else event.id,
        turn_id=base.turn_id if base is not None else event.id,
        chat_id=child.envelope.chat_id,
        trace_id=child.envelope.trace_id,
        correlation_id=base.correlation_id if base is not None else event.id,
        kind="message",
        text=result_text(child),
        sender=base.sender if base is not None else _child_sender(child),
        reply_to=None,
        key=base.key if base is not None else "",
        hops=base.hops if base is not None else 0,
        depth=child.depth - 1,
    )
    chat = state.chat
    return with_changes(state, chat=with_changes(chat, pending=(*chat.pending, follow)))


def interrupted(state: SessionState, turn_id: str, mode: str) -> SessionState:
    """The parent turn was interrupted: its running children must be too."""
    if mode not in ("graceful", "hard"):
        return state
    children = tuple(
        with_changes(c, interrupt=mode)
        if c.turn_id == turn_id and c.status == "running" and c.interrupt is None
        else c
        for c in state.children
    )
    return with_changes(state, children=children)


def interrupt_sent(state: SessionState, invocation_id: str | None) -> SessionState:
    child = find_child(state, invocation_id or "")
    if child is None:
        return state
    return _replace(state, with_changes(child, interrupt_sent=True))


# -- decide ---------------------------------------------------------------------------


def step(state: SessionState, ctx: Context) -> list[Event]:
    """The next sub-turn events: a child's end, then its result's delivery."""
    for child in state.children:
        if child.status == "running" and child.result is not None:
            r = child.result
            data = SubTurnEndedData(
                invocation_id=child.invocation_id,
                child_session_id=child.session_id,
                child_turn_id=r.child_turn_id,
                status=r.status,
                failure_class=r.failure,
                reply=r.reply,
            )
            return [child_event(child, SubTurnEnded, data, ctx)]
        if child.status == "running" and ctx.now >= child.deadline:
            data = SubTurnEndedData(
                invocation_id=child.invocation_id,
                child_session_id=child.session_id,
                status="failed",
                failure_class=FailureClass.TIMEOUT,
                reply=f"the sub-turn did not end by its deadline ({child.deadline.isoformat()})",
            )
            return [child_event(child, SubTurnEnded, data, ctx)]
        if child.status == "ended":
            return _deliver(state, child, ctx)
    return []


def next_deadline(state: SessionState) -> datetime | None:
    """When the first running child's deadline passes (the shell wakes the session)."""
    times = [c.deadline for c in state.children if c.status == "running" and c.result is None]
    return min(times) if times else None


def waiting_on(state: SessionState) -> bool:
    """Children still to end or deliver: the session has open work."""
    return any(c.status != "delivered" for c in state.children)


def result_text(child: Child) -> str:
    """How a child's result reads to its parent's model."""
    r = child.result
    assert r is not None
    if r.status == "completed":
        return f"[sub-turn {child.session_id} completed] {r.reply}"
    why = f" ({r.failure})" if r.failure else ""
    return f"[sub-turn {child.session_id} {r.status}{why}] {r.reply}"


def _deliver(state: SessionState, child: Child, ctx: Context) -> list[Event]:
    r = child.result
    assert r is not None
    turn = state.chat.active
    running = turn is not None and turn.turn_id == child.turn_id and turn.end is None
    events: list[Event] = []
    if child.mode == "sync":
        call = None
        if running and turn is not None:
            call = next((c for c in turn.calls if c.invocation_id == child.invocation_id), None)
        if call is not None and call.status == "requested":
            events.append(_tool_result(child, ctx))
            how = "tool_result"
        else:
            how = "dropped"
    elif running and turn is not None and not _rendered(turn):
        input_id = r.input.input_id if r.input is not None else SUBTURN_INPUT + child.invocation_id
        steer = SteeringInjectedData(input_id=input_id, text=result_text(child))
        events.append(child_event(child, SteeringInjected, steer, ctx))
        how = "steering"
    else:
        how = "follow_up"
    data = SubTurnResultDeliveredData(
        invocation_id=child.invocation_id,
        child_session_id=child.session_id,
        delivered_as=how,
        input_id=r.input.input_id if r.input is not None else None,
    )
    events.append(child_event(child, SubTurnResultDelivered, data, ctx))
    return events


def _tool_result(child: Child, ctx: Context) -> Event:
    r = child.result
    assert r is not None
    if r.status == "completed":
        ok = ToolInvocationSucceededData(
            invocation_id=child.invocation_id,
            output=r.reply,
            size=len(r.reply.encode()),
            duration_ms=_ms_since(child.spawned_at, ctx),
        )
        return child_event(child, ToolInvocationSucceeded, ok, ctx)
    error = ToolError(
        error_class=r.failure or FailureClass.TOOL_RUNTIME_ERROR,
        kind="subturn_failed" if r.failure != FailureClass.TIMEOUT else "timeout",
        detail=result_text(child),
    )
    failed = ToolInvocationFailedData(
        invocation_id=child.invocation_id,
        error=error,
        duration_ms=_ms_since(child.spawned_at, ctx),
    )
    return child_event(child, ToolInvocationFailed, failed, ctx)


def _ms_since(at: datetime | None, ctx: Context) -> float:
    return 0.0 if at is None else max((ctx.now - at).total_seconds() * 1000, 0.0)


def child_event(child: Child, cls: type[EventBase], data: Any, ctx: Context) -> Event:
    """An event about a child, filed under the parent turn that spawned it."""
    assert child.envelope is not None
    return filed(child.envelope, child.last_event_id or None, cls, data, ctx)


def filed(
    envelope: Envelope, cause: str | None, cls: type[EventBase], data: Any, ctx: Context
) -> Event:
    """An event filed where `envelope` says (a turn other than the active one)."""
    event = stamp(
        cls,
        data,
        envelope,
        event_id=ctx.new_id(),
        time=ctx.now,
        source=ctx.source,
        causation_id=cause,
    )
    return event  # type: ignore[return-value]


def _child_sender(child: Child) -> Sender:
    return Sender(kind="agent", id=child.session_id)


def find_child(state: SessionState, invocation_id: str | None) -> Child | None:
    """The child a `spawn` call (its invocation id) started, if any."""
    return next((c for c in state.children if c.invocation_id == invocation_id), None)


def _replace(state: SessionState, child: Child) -> SessionState:
    children = tuple(child if c.invocation_id == child.invocation_id else c for c in state.children)
    return with_changes(state, children=children)


def _rendered(turn: ActiveTurn) -> bool:
    """The turn's reply is rendered: a result can no longer steer it."""
    return isinstance(turn.phase, Rendering) and turn.phase.rendered
