"""Messages a session sends to other sessions (DESIGN §11), decided from its state.

    a turn whose input had replyTo ends ──► its reply (any status)
    an approved send_message call     ──► the message (replyTo = this session if expectReply)
    an approved spawn call            ──► the child's input (replyTo = this session, parent)
    an interrupted parent turn        ──► the same interrupt to its running children

`wanted(state)` lists them; the shell publishes each to `<prefix>.in.<to>` with
`Nats-Msg-Id` = its idempotency key, which is derived from the turn or the tool call (so a
crash and a retry publish the same message, and the receiving gateway keeps one), then
hands back `Published(keys)`; `record` gives the events that say so (`MessageSent`, and
`SubTurnSpawned` or the call's result). What is recorded is no longer wanted: a message is
published until the log says it was, never after. Past TURNSTREAM_MAX_HOPS a message is
not sent: `MessageDropped{hop_limit}` (and a `send_message` or `spawn` call fails
`limit_exceeded`, which the model sees: `runtime_calls` judges each call).
"""

from __future__ import annotations

import orjson

from turnstream.core.events import (
    Event,
    FailureClass,
    MessageDropped,
    MessageDroppedData,
    MessageSent,
    MessageSentData,
    SubTurnSpawned,
    ToolError,
    ToolInvocationFailed,
    ToolInvocationFailedData,
    ToolInvocationSucceeded,
    ToolInvocationSucceededData,
)
from turnstream.core.session.messages import (
    Outbound,
    call_message,
    interrupt_message,
    rejection_message,
    reply_key,
    reply_message,
)
from turnstream.core.session.state import SessionState
from turnstream.core.session.subturns import child_event, filed, find_child, spawned_by
from turnstream.core.turn.builder import Builder
from turnstream.core.turn.runtime_calls import (
    budget_share,
    judged_with_shares,
    problem,
)
from turnstream.core.turn.runtime_tools import is_runtime_tool
from turnstream.core.turn.state import (
    Context,
    TurnConfig,
)


def wanted(state: SessionState, config: TurnConfig) -> list[Outbound]:
    """Every message `state` wants delivered and has not recorded as delivered."""
    out: list[Outbound] = []
    turn = state.chat.active
    if turn is not None:
        if (
            turn.end is not None
            and turn.reply_to is not None
            and not turn.end.reply_settled
            and turn.hops + 1 <= config.max_hops
        ):
            out.append(reply_message(state, turn))
        for call, error, share in judged_with_shares(turn, config, spawned_by(state)):
            if error is None:
                out.append(call_message(state, turn, call, config, share))
    for child in state.children:
        if child.interrupt is not None and not child.interrupt_sent and child.status == "running":
            out.append(interrupt_message(state, child))
    for rejected in state.unanswered:
        if rejected.hops + 1 <= config.max_hops:
            out.append(rejection_message(state, rejected))
    return out


def rejections_dropped(state: SessionState, config: TurnConfig, ctx: Context) -> list[Event]:
    """Rejections whose reply would pass the hop limit: not sent."""
    return [
        filed(
            r.envelope,
            r.event_id,
            MessageDropped,
            MessageDroppedData(to=r.reply_to, reason="hop_limit", hops=r.hops + 1, cause="replyTo"),
            ctx,
        )
        for r in state.unanswered
        if r.hops + 1 > config.max_hops
    ]


def record(
    state: SessionState, keys: frozenset[str], config: TurnConfig, ctx: Context
) -> list[Event]:
    """The events that record the messages in `keys` as delivered: those `state` wants,
    and a call's message that went out just before its turn stopped wanting it (e.g. an
    interrupt folded in a reload between the publish and this record: the child exists, so
    it is recorded, and only a call still open gets a result)."""
    events: list[Event] = []
    turn = state.chat.active
    b = Builder(state.session_id, turn, ctx) if turn is not None else None
    listed = wanted(state, config)
    for o in [*listed, *_went_out(state, config, keys, {o.key for o in listed})]:
        if o.key not in keys:
            continue
        sent = MessageSentData(
            to=o.to,
            idempotency_key=o.key,
            hops=o.hops,
            cause=o.cause,
            kind=o.kind,
            invocation_id=o.invocation_id,
            in_reply_to=o.in_reply_to,
        )
        if o.kind == "interrupt":
            child = find_child(state, o.invocation_id)
            assert child is not None  # `wanted` lists an interrupt for a known child only
            events.append(child_event(child, MessageSent, sent, ctx))
            continue
        if o.rejected is not None:
            events.append(filed(o.rejected.envelope, o.rejected.event_id, MessageSent, sent, ctx))
            continue
        assert b is not None
        if o.spawned is not None:
            events.append(b.make(SubTurnSpawned, o.spawned))
        events.append(b.make(MessageSent, sent))
        assert turn is not None
        call = next((c for c in turn.calls if c.invocation_id == o.invocation_id), None)
        if call is None or call.status != "approved":
            continue
        if o.cause == "send_message":
            reply = " (its reply will come as a new message)" if o.expect_reply else ""
            events.append(_succeeded(b, o, f"sent to {o.to} as {o.key}{reply}"))
        elif o.spawned is not None and o.spawned.mode == "async":
            body = {"childSessionId": o.to, "status": "running"}
            events.append(_succeeded(b, o, orjson.dumps(body).decode()))
    return events


def refused(
    state: SessionState, why: dict[str, str], config: TurnConfig, ctx: Context
) -> list[Event]:
    """The events that end the delivery of the messages the server refused (key → why):
    each `MessageDropped{refused}`, and a runtime call's failure, which the model sees."""
    events: list[Event] = []
    turn = state.chat.active
    for o in wanted(state, config):
        if o.key not in why:
            continue
        data = MessageDroppedData(
            to=o.to,
            reason="refused",
            hops=o.hops,
            cause=o.cause,
            invocation_id=o.invocation_id,
            detail=why[o.key],
        )
        if o.kind == "interrupt":
            child = find_child(state, o.invocation_id)
            assert child is not None  # `wanted` lists an interrupt for a known child only
            events.append(child_event(child, MessageDropped, data, ctx))
        elif o.rejected is not None:
            rejected = o.rejected
            events.append(filed(rejected.envelope, rejected.event_id, MessageDropped, data, ctx))
        else:
            assert turn is not None
            b = Builder(state.session_id, turn, ctx)
            events.append(b.make(MessageDropped, data))
            if o.invocation_id is not None:
                error = ToolError(
                    error_class=FailureClass.POLICY_DENIED,
                    kind="refused",
                    detail=f"the message to {o.to} was refused: {why[o.key]}",
                )
                failed = ToolInvocationFailedData(invocation_id=o.invocation_id, error=error)
                events.append(b.make(ToolInvocationFailed, failed))
    return events


def _went_out(
    state: SessionState, config: TurnConfig, keys: frozenset[str], listed: set[str]
) -> list[Outbound]:
    """Messages of this turn's runtime calls in `keys` that `wanted` no longer lists
    (`listed`: the keys it lists)."""
    turn = state.chat.active
    if turn is None:
        return []
    out, spawned = [], spawned_by(state)
    for call in turn.calls:
        if not is_runtime_tool(call.tool) or call.status not in ("approved", "cancelled"):
            continue
        if problem(turn, call, config, spawned) is not None:
            continue
        o = call_message(state, turn, call, config, budget_share(turn, config, spawned, 0))
        if o.key in keys and o.key not in listed:
            out.append(o)
    return out


def _succeeded(b: Builder, o: Outbound, output: str) -> Event:
    assert o.invocation_id is not None
    data = ToolInvocationSucceededData(
        invocation_id=o.invocation_id, output=output, size=len(output), duration_ms=0.0
    )
    return b.make(ToolInvocationSucceeded, data)


__all__ = [
    "Outbound",
    "record",
    "refused",
    "rejections_dropped",
    "reply_key",
    "wanted",
]
