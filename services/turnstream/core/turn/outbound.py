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
`limit_exceeded`, which the model sees).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from turnstream.core.commands import AGENT_NAME_PATTERN, MAX_TEXT_CHARS
from turnstream.core.events import (
    Event,
    FailureClass,
    MessageCause,
    MessageDropped,
    MessageDroppedData,
    MessageSent,
    MessageSentData,
    ParentRef,
    Stage,
    SubTurnSpawned,
    SubTurnSpawnedData,
    ToolError,
    ToolInvocationFailed,
    ToolInvocationFailedData,
    ToolInvocationSucceeded,
    ToolInvocationSucceededData,
)
from turnstream.core.subjects import is_reserved_session, is_session_id
from turnstream.core.turn.agent import is_runtime_tool
from turnstream.core.turn.builder import Builder
from turnstream.core.turn.state import (
    ActiveTurn,
    ChatState,
    Child,
    Context,
    ToolCallState,
    TurnConfig,
    Unanswered,
)
from turnstream.core.turn.subturns import child_event, filed
from turnstream.core.turn.tool_call import dispatchable

_AGENT = re.compile(AGENT_NAME_PATTERN)


@dataclass(frozen=True, slots=True)
class Outbound:
    """One message the session's state wants delivered."""

    key: str
    """Its idempotency key and `Nats-Msg-Id`."""
    to: str
    command: dict[str, Any]
    """The inbound command, as JSON (`turnstream.core.commands`)."""
    cause: MessageCause
    kind: Literal["message", "interrupt"] = "message"
    hops: int = 0
    invocation_id: str | None = None
    in_reply_to: str | None = None
    spawned: SubTurnSpawnedData | None = None
    expect_reply: bool = False
    rejected: Unanswered | None = None
    """A rejected input's reply (filed under the rejection's turn)."""

    def payload(self) -> bytes:
        return orjson.dumps(self.command)


def reply_key(turn_id: str) -> str:
    return f"reply:{turn_id}"


def child_session_id(parent: str, invocation_id: str) -> str:
    """The child session a `spawn` call starts: named after its parent where it fits."""
    digest = hashlib.blake2b(invocation_id.encode(), digest_size=6).hexdigest()
    name = f"{parent}:sub-{digest}"
    return name if len(name) <= 128 else f"sub-{digest}"


def wanted(state: ChatState, config: TurnConfig) -> list[Outbound]:
    """Every message `state` wants delivered and has not recorded as delivered."""
    out: list[Outbound] = []
    turn = state.active
    if turn is not None:
        if (
            turn.ended is not None
            and turn.reply_to is not None
            and not turn.reply_settled
            and turn.hops + 1 <= config.max_hops
        ):
            out.append(_reply(state, turn))
        for call, error, share in _judged(state, turn, config):
            if error is None:
                out.append(_for_call(state, turn, call, config, share))
    for child in state.children:
        if child.interrupt is not None and not child.interrupt_sent and child.status == "running":
            out.append(_interrupt(state, child))
    for rejected in state.unanswered:
        if rejected.hops + 1 <= config.max_hops:
            out.append(_rejection(state, rejected))
    return out


def rejections_dropped(state: ChatState, config: TurnConfig, ctx: Context) -> list[Event]:
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


def runtime_calls(turn: ActiveTurn, config: TurnConfig) -> list[ToolCallState]:
    """Approved `send_message`/`spawn` calls whose turn may run them now (in call order),
    once the tool hooks, if any, let them through."""
    if turn.ended is not None or turn.abort is not None or turn.interrupt is not None:
        return []
    if turn.stage is not Stage.TOOL_CALL or not turn.stage_open:
        return []
    return [
        c
        for c in dispatchable(turn.calls)
        if is_runtime_tool(c.tool) and (c.hooked or not config.tool_hooks)
    ]


def judged(
    state: ChatState, turn: ActiveTurn, config: TurnConfig
) -> list[tuple[ToolCallState, ToolError | None]]:
    """Each runtime call the turn may run now, and why it cannot (None: it can); spawns
    that go out together count against the running-children limit in call order."""
    return [(call, error) for call, error, _ in _judged(state, turn, config)]


def _judged(
    state: ChatState, turn: ActiveTurn, config: TurnConfig
) -> list[tuple[ToolCallState, ToolError | None, int]]:
    """`judged`, with the budget share each spawn that can go would give its child."""
    out: list[tuple[ToolCallState, ToolError | None, int]] = []
    spawning = spent = 0
    for call in runtime_calls(turn, config):
        error = problem(state, turn, call, config, spawning, spent)
        share = 0
        if call.tool == "spawn" and error is None:
            share = budget_share(state, turn, config, spent)
            spawning, spent = spawning + 1, spent + 1 + share
        out.append((call, error, share))
    return out


def budget_left(state: ChatState, turn: ActiveTurn, config: TurnConfig, spent: int = 0) -> int:
    """Sub-turns this turn may still start, below it included."""
    total = turn.budget if turn.budget is not None else config.max_subturns_per_root
    used = sum(1 + c.budget for c in state.children if c.turn_id == turn.turn_id)
    return total - used - spent


def budget_share(state: ChatState, turn: ActiveTurn, config: TurnConfig, spent: int) -> int:
    """What a new child gets of what is left after itself: a fair part, so a tree never
    starts more than its root's budget."""
    left = budget_left(state, turn, config, spent) - 1
    return max(left // max(config.max_subturns, 1), 0)


def problem(
    state: ChatState,
    turn: ActiveTurn,
    call: ToolCallState,
    config: TurnConfig,
    spawning: int = 0,
    spent: int = 0,
) -> ToolError | None:
    """Why an approved runtime call cannot be run (a tool failure the model sees);
    `spawning`: sub-turns of this turn about to start before it, `spent`: their cost."""
    args = call.args

    def invalid(detail: str) -> ToolError:
        return ToolError(
            error_class=FailureClass.INVALID_INPUT, kind="invalid_arguments", detail=detail
        )

    def limit(kind: str, detail: str) -> ToolError:
        return ToolError(error_class=FailureClass.LIMIT_EXCEEDED, kind=kind, detail=detail)

    if config.stage is not None:  # a stage's lane has no outbox: its envelope is the workflow's
        return ToolError(
            error_class=FailureClass.POLICY_DENIED,
            kind="unsupported",
            detail=f"{call.tool} is not available inside a workflow stage",
        )
    if call.tool == "send_message":
        to, text = args.get("to"), args.get("text")
        if not isinstance(to, str) or not is_session_id(to) or is_reserved_session(to):
            return invalid(f"`to` must be a session id (1-128 of [A-Za-z0-9_:-]), not {to!r}")
        if not isinstance(text, str) or not text.strip():
            return invalid("`text` is required: the message to send")
        if len(text) > MAX_TEXT_CHARS:
            return invalid(f"`text` is {len(text)} characters; the limit is {MAX_TEXT_CHARS}")
        if not isinstance(args.get("expectReply", False), bool):
            return invalid("`expectReply` must be true or false")
    else:
        task, agent, mode = args.get("task"), args.get("agent"), args.get("mode", "sync")
        if not isinstance(task, str) or not task.strip():
            return invalid("`task` is required: what the sub-turn must do")
        if len(task) > MAX_TEXT_CHARS:
            return invalid(f"`task` is {len(task)} characters; the limit is {MAX_TEXT_CHARS}")
        if mode not in ("sync", "async"):
            return invalid(f"`mode` must be sync or async, not {mode!r}")
        if agent is not None and (not isinstance(agent, str) or not _AGENT.match(agent)):
            return invalid(f"`agent` must be an agent profile's name, not {agent!r}")
        if agent is not None and config.agents is not None and agent not in config.agents:
            known = ", ".join(sorted(config.agents)) or "none"
            return invalid(f"there is no agent {agent!r}; known: {known}")
        if turn.depth + 1 > config.max_subturn_depth:
            return limit(
                "depth_limit",
                f"a sub-turn here would be at depth {turn.depth + 1}; "
                f"TURNSTREAM_MAX_SUBTURN_DEPTH={config.max_subturn_depth}: do the task yourself",
            )
        running = spawning + sum(
            1 for c in state.children if c.turn_id == turn.turn_id and c.status == "running"
        )
        if running >= config.max_subturns:
            return limit(
                "subturn_limit",
                f"{running} sub-turns of this turn are running; TURNSTREAM_MAX_SUBTURNS="
                f"{config.max_subturns}: wait for one to end (spawn sync) or do it yourself",
            )
        if budget_left(state, turn, config, spent) < 1:
            return limit(
                "tree_limit",
                "this turn's tree of sub-turns has started all it may "
                f"(TURNSTREAM_MAX_SUBTURNS_PER_ROOT={config.max_subturns_per_root}): "
                "do the task yourself",
            )
    if turn.hops + 1 > config.max_hops:
        return limit(
            "hop_limit",
            f"this message would be delivery {turn.hops + 1} of its chain; "
            f"TURNSTREAM_MAX_HOPS={config.max_hops}",
        )
    return None


def refuse(b: Builder, state: ChatState, turn: ActiveTurn, config: TurnConfig) -> list[Event]:
    """The failures of approved runtime calls that cannot run (bad arguments, a limit);
    past the hop limit, the message is `MessageDropped` first."""
    events: list[Event] = []
    for call, error in judged(state, turn, config):
        if error is None:
            continue
        if error.kind == "hop_limit":
            to = call.args.get("to") if call.tool == "send_message" else None
            cause: MessageCause = "send_message" if call.tool == "send_message" else "subturn"
            dropped = MessageDroppedData(
                to=str(to or child_session_id(state.session_id, call.invocation_id)),
                reason="hop_limit",
                hops=turn.hops + 1,
                cause=cause,
                invocation_id=call.invocation_id,
            )
            events.append(b.make(MessageDropped, dropped))
        failed = ToolInvocationFailedData(invocation_id=call.invocation_id, error=error)
        events.append(b.make(ToolInvocationFailed, failed))
    return events


def reply_dropped(b: Builder, turn: ActiveTurn, config: TurnConfig) -> list[Event]:
    """A reply past the hop limit is not sent; nothing else is decided for it here."""
    if turn.reply_to is None or turn.reply_settled or turn.hops + 1 <= config.max_hops:
        return []
    data = MessageDroppedData(
        to=turn.reply_to, reason="hop_limit", hops=turn.hops + 1, cause="replyTo"
    )
    return [b.make(MessageDropped, data)]


def record(state: ChatState, keys: frozenset[str], config: TurnConfig, ctx: Context) -> list[Event]:
    """The events that record the messages in `keys` as delivered: those `state` wants,
    and a call's message that went out just before its turn stopped wanting it (e.g. an
    interrupt folded in a reload between the publish and this record: the child exists, so
    it is recorded, and only a call still open gets a result)."""
    events: list[Event] = []
    turn = state.active
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
            child = next(c for c in state.children if c.invocation_id == o.invocation_id)
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


def refused(state: ChatState, why: dict[str, str], config: TurnConfig, ctx: Context) -> list[Event]:
    """The events that end the delivery of the messages the server refused (key → why):
    each `MessageDropped{refused}`, and a runtime call's failure, which the model sees."""
    events: list[Event] = []
    turn = state.active
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
            child = next(c for c in state.children if c.invocation_id == o.invocation_id)
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
    state: ChatState, config: TurnConfig, keys: frozenset[str], listed: set[str]
) -> list[Outbound]:
    """Messages of this turn's runtime calls in `keys` that `wanted` no longer lists
    (`listed`: the keys it lists)."""
    turn = state.active
    if turn is None:
        return []
    out = []
    for call in turn.calls:
        if not is_runtime_tool(call.tool) or call.status not in ("approved", "cancelled"):
            continue
        if problem(state, turn, call, config) is not None:
            continue
        o = _for_call(state, turn, call, config, budget_share(state, turn, config, 0))
        if o.key in keys and o.key not in listed:
            out.append(o)
    return out


def _succeeded(b: Builder, o: Outbound, output: str) -> Event:
    assert o.invocation_id is not None
    data = ToolInvocationSucceededData(
        invocation_id=o.invocation_id, output=output, size=len(output), duration_ms=0.0
    )
    return b.make(ToolInvocationSucceeded, data)


def _sender(state: ChatState) -> dict[str, str]:
    return {"kind": "agent", "id": state.session_id}


def _reply(state: ChatState, turn: ActiveTurn) -> Outbound:
    assert turn.reply_to is not None and turn.ended is not None
    if turn.ended == "completed":
        text = turn.reply or "(the turn completed with no text)"
    else:
        why = f" ({turn.failure})" if turn.failure else ""
        text = f"turn {turn.ended}{why}: {turn.end_reason or 'no reason given'}"
    return _answer(
        state,
        turn.turn_id,
        turn.reply_to,
        turn.input_key,
        turn.hops,
        text,
        turn.ended,
        turn.failure,
    )


def _rejection(state: ChatState, rejected: Unanswered) -> Outbound:
    return _answer(
        state,
        rejected.turn_id,
        rejected.reply_to,
        rejected.key,
        rejected.hops,
        f"turn failed (invalid_input): {rejected.reason}",
        "failed",
        FailureClass.INVALID_INPUT,
        rejected,
    )


def _answer(
    state: ChatState,
    turn_id: str,
    to: str,
    in_reply_to: str,
    hops: int,
    text: str,
    status: str,
    failure: str | None,
    rejected: Unanswered | None = None,
) -> Outbound:
    """The message that answers a turn's input at its `replyTo` (the turn's reply, or the
    gateway's rejection of it), `inReplyTo` the input's key."""
    key = reply_key(turn_id)
    outcome = {"turnId": turn_id, "status": status, "failureClass": failure}
    command = {
        "type": "message",
        "sessionId": to,
        "chatId": to,
        "sender": _sender(state),
        "text": text[:MAX_TEXT_CHARS],
        "idempotencyKey": key,
        "inReplyTo": in_reply_to or None,
        "hops": hops + 1,
        "outcome": {k: v for k, v in outcome.items() if v is not None},
    }
    return Outbound(
        key,
        to,
        _compact(command),
        "replyTo",
        hops=hops + 1,
        in_reply_to=in_reply_to or None,
        rejected=rejected,
    )


def _for_call(
    state: ChatState,
    turn: ActiveTurn,
    call: ToolCallState,
    config: TurnConfig,
    share: int = 0,
) -> Outbound:
    args, hops = call.args, turn.hops + 1
    if call.tool == "send_message":
        to, expect = str(args["to"]), bool(args.get("expectReply", False))
        key = f"msg:{call.invocation_id}"
        command = {
            "type": "message",
            "sessionId": to,
            "chatId": to,
            "sender": _sender(state),
            "text": args["text"],
            "idempotencyKey": key,
            "hops": hops,
            "replyTo": state.session_id if expect else None,
        }
        return Outbound(
            key,
            to,
            _compact(command),
            "send_message",
            hops=hops,
            invocation_id=call.invocation_id,
            expect_reply=expect,
        )
    child = child_session_id(state.session_id, call.invocation_id)
    key = f"spawn:{call.invocation_id}"
    agent = args.get("agent") or config.agent
    depth = turn.depth + 1
    spawned = SubTurnSpawnedData(
        invocation_id=call.invocation_id,
        child_session_id=child,
        agent=agent,
        mode=args.get("mode", "sync"),
        depth=depth,
        task=args["task"],
        idempotency_key=key,
        deadline_s=config.subturn_deadline_s,
        budget=share,
    )
    parent = ParentRef(
        session_id=state.session_id,
        turn_id=turn.turn_id,
        invocation_id=call.invocation_id,
        depth=depth,
        budget=share,
    )
    command = {
        "type": "message",
        "sessionId": child,
        "chatId": child,
        "sender": _sender(state),
        "text": args["task"],
        "idempotencyKey": key,
        "hops": hops,
        "replyTo": state.session_id,
        "agent": agent,
        "parent": parent.model_dump(mode="json", by_alias=True),
    }
    return Outbound(
        key,
        child,
        _compact(command),
        "subturn",
        hops=hops,
        invocation_id=call.invocation_id,
        spawned=spawned,
    )


def _interrupt(state: ChatState, child: Child) -> Outbound:
    key = f"interrupt:{child.invocation_id}"
    command = {
        "type": "interrupt",
        "sessionId": child.session_id,
        "chatId": child.session_id,
        "sender": _sender(state),
        "idempotencyKey": key,
        "mode": child.interrupt,
    }
    return Outbound(
        key,
        child.session_id,
        command,
        "subturn",
        kind="interrupt",
        invocation_id=child.invocation_id,
    )


def _compact(command: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in command.items() if v is not None}


__all__ = [
    "Outbound",
    "child_session_id",
    "problem",
    "record",
    "refuse",
    "refused",
    "rejections_dropped",
    "reply_dropped",
    "reply_key",
    "runtime_calls",
    "wanted",
]
