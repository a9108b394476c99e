"""The messages a session sends (`turnstream.core.session.outbound` decides when): each
as the inbound command the receiving session's gateway takes, with its idempotency key."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import orjson

from turnstream.core.commands import MAX_TEXT_CHARS
from turnstream.core.events import FailureClass, MessageCause, ParentRef, SubTurnSpawnedData
from turnstream.core.session.state import Child, SessionState, Unanswered
from turnstream.core.turn.runtime_calls import child_session_id
from turnstream.core.turn.state import ActiveTurn, ToolCallState, TurnConfig


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


def _sender(state: SessionState) -> dict[str, str]:
    return {"kind": "agent", "id": state.session_id}


def reply_message(state: SessionState, turn: ActiveTurn) -> Outbound:
    end = turn.end
    assert turn.reply_to is not None and end is not None
    if end.status == "completed":
        text = turn.reply or "(the turn completed with no text)"
    else:
        why = f" ({end.failure})" if end.failure else ""
        text = f"turn {end.status}{why}: {end.reason or 'no reason given'}"
    return _answer(
        state,
        turn.turn_id,
        turn.reply_to,
        turn.input_key,
        turn.hops,
        text,
        end.status,
        end.failure,
    )


def rejection_message(state: SessionState, rejected: Unanswered) -> Outbound:
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
    state: SessionState,
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


def call_message(
    state: SessionState,
    turn: ActiveTurn,
    call: ToolCallState,
    config: TurnConfig,
    share: int = 0,
) -> Outbound:
    """The message an approved `send_message` or `spawn` call sends."""
    if call.tool == "send_message":
        return _sent_message(state, turn, call)
    args, hops = call.args, turn.hops + 1
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


def _sent_message(state: SessionState, turn: ActiveTurn, call: ToolCallState) -> Outbound:
    args, hops = call.args, turn.hops + 1
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


def interrupt_message(state: SessionState, child: Child) -> Outbound:
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
