"""One raw inbound command checked (`check`: the command, or why it is rejected) and the
events that record a rejection (`rejected`: `InputRejected`, then the turn's `TurnEnded`).

Event ids are derived from the inbound stream sequence (`CommandIds`), so a redelivered
command yields the same ids and the log's dedup makes the retry a no-op.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from pydantic import ValidationError

from turnstream.core.commands import (
    COMMAND_ADAPTER,
    COMMAND_TYPES,
    DOOR_COMMANDS,
    InboundCommand,
)
from turnstream.core.events import (
    Envelope,
    EventBase,
    FailureClass,
    InputRejected,
    InputRejectedData,
    RejectionKind,
    TurnEnded,
    TurnEndedData,
    stamp,
)
from turnstream.core.ids import derived_id
from turnstream.core.subjects import REJECTED_SESSION, is_reserved_session, is_session_id

EXCERPT_BYTES = 512
_DOOR_IS = {
    "agent": "the runtime's own subject for its agents' messages",
    "answer": "the subject for answers to approval prompts",
}


@dataclass(frozen=True, slots=True)
class Inbound:
    """One raw command as it came off the inbound stream."""

    session_token: str
    """The session part of the subject it was published on."""
    data: bytes
    seq: int
    stored_at: datetime
    stream: str
    msg_id: str | None = None
    """Its `Nats-Msg-Id` header: the sender's key even when the body cannot be parsed."""
    door: str | None = None
    """The door it came through (`Subjects.door_of`): on the runtime's own
    `<prefix>.in.<session>.agent` only the commands the turn-runner sends are taken, on the
    people's `<prefix>.in.<session>.answer` only answers (`DOOR_COMMANDS`); None: the plain
    `<prefix>.in.<session>`, which takes every command."""


@dataclass(frozen=True, slots=True)
class Rejection:
    kind: RejectionKind
    reason: str
    errors: list[str]
    fields: dict[str, Any]


def fields_of(parsed: InboundCommand) -> dict[str, Any]:
    """The envelope fields a rejection of a well-formed command keeps, so its sender can
    match the rejection (`correlationId` = its idempotencyKey)."""
    return {
        "sessionId": parsed.session_id,
        "chatId": parsed.chat_id,
        "idempotencyKey": parsed.idempotency_key,
        "replyTo": parsed.reply_to,
        "hops": getattr(parsed, "hops", 0),
    }


def check(raw: Inbound, *, max_bytes: int) -> InboundCommand | Rejection:
    """The command, or why it is rejected (first failing check wins)."""
    body = _body(raw, max_bytes)
    if isinstance(body, Rejection):
        return body
    fields: dict[str, Any] = {
        k: body[k]
        for k in ("sessionId", "chatId", "idempotencyKey", "replyTo", "hops")
        if k in body
    }
    why = _misaddressed(raw, body, fields)
    if why is not None:
        return why
    return _validated(raw, body, fields)


def _body(raw: Inbound, max_bytes: int) -> dict[str, Any] | Rejection:
    """The command's JSON object, within the size limit."""
    if len(raw.data) > max_bytes:
        return Rejection(
            "oversize",
            f"command is {len(raw.data)} bytes; the limit is {max_bytes} "
            "(TURNSTREAM_MAX_INPUT_BYTES). Send large content as a file the tools can read.",
            [],
            {},
        )
    try:
        body = orjson.loads(raw.data)
    except orjson.JSONDecodeError as exc:
        return Rejection("not_json", f"payload is not JSON ({exc}); publish a JSON object", [], {})
    if not isinstance(body, dict):
        return Rejection(
            "not_json", f"payload is JSON {type(body).__name__}, expected an object", [], {}
        )
    return body


def _misaddressed(raw: Inbound, body: dict[str, Any], fields: dict[str, Any]) -> Rejection | None:
    """Why the command may not go where it was published: a reserved or malformed session
    in the subject, an unknown type, a type its door does not take."""
    if is_reserved_session(raw.session_token) or is_reserved_session(body.get("sessionId", "")):
        return Rejection(
            "bad_session_id",
            f"session id {REJECTED_SESSION!r} is reserved: the runtime records unroutable "
            "input there, so no command may address it; use another session id",
            [],
            fields,
        )
    if not is_session_id(raw.session_token):
        return Rejection(
            "bad_session_id",
            f"session id {raw.session_token!r} in the subject is not 1-128 of [A-Za-z0-9_:-]",
            [],
            fields,
        )
    kind = body.get("type")
    if kind not in COMMAND_TYPES:
        return Rejection(
            "unknown_type",
            f"unknown command type {kind!r}; expected one of {', '.join(COMMAND_TYPES)}",
            [],
            fields,
        )
    if raw.door is not None and kind not in (taken := DOOR_COMMANDS[raw.door]):
        return Rejection(
            "not_permitted",
            f"a {kind!r} command is refused on <prefix>.in.<session>.{raw.door}, "
            f"{_DOOR_IS[raw.door]}: it takes only {' and '.join(taken)}; "
            f"publish {kind!r} to <prefix>.in.<sessionId> as a user allowed there",
            [f"type: {kind!r} is not taken on the {raw.door} subject"],
            fields,
        )
    return None


def _validated(
    raw: Inbound, body: dict[str, Any], fields: dict[str, Any]
) -> InboundCommand | Rejection:
    """The command as its schema reads it, for the session of its subject."""
    try:
        command = COMMAND_ADAPTER.validate_python(body)
    except ValidationError as exc:
        errors = [
            f"{'.'.join(str(p) for p in err['loc'][1:]) or '(root)'}: {err['msg']}"
            for err in exc.errors(include_url=False)
        ]
        if any(e.startswith("sessionId:") for e in errors):
            return Rejection(
                "bad_session_id",
                "sessionId must be 1-128 of [A-Za-z0-9_:-]",
                errors,
                fields,
            )
        return Rejection(
            "schema",
            f"command does not match the '{body.get('type')}' schema: {errors[0]}",
            errors,
            fields,
        )
    if command.session_id != raw.session_token:
        return Rejection(
            "schema",
            f"sessionId {command.session_id!r} differs from the subject's session "
            f"{raw.session_token!r}; publish to <prefix>.in.<sessionId>",
            [],
            fields,
        )
    return command


class CommandIds:
    """The ids of the events a raw command yields, each derived from its inbound seq."""

    def __init__(self, raw: Inbound) -> None:
        self.ms = int(raw.stored_at.timestamp() * 1000)
        self.key = f"{raw.stream}:{raw.seq}"

    def __call__(self, purpose: str) -> str:
        return derived_id(self.key, purpose, self.ms)


def rejected(
    raw: Inbound, why: Rejection, ids: CommandIds, now: datetime, source: str
) -> list[EventBase]:
    """The events that record `why` `raw` is rejected."""
    session = raw.session_token if is_session_id(raw.session_token) else REJECTED_SESSION
    chat = why.fields.get("chatId")
    key = why.fields.get("idempotencyKey")
    if not (isinstance(key, str) and key):
        key = raw.msg_id  # unparsable body: the publish header is all the sender has
    envelope = Envelope(
        session,
        chat if isinstance(chat, str) and chat else "unknown",
        ids("turn"),
        ids("trace"),
        key if isinstance(key, str) and key else ids("correlation"),
    )
    reply_to, hops = why.fields.get("replyTo"), why.fields.get("hops", 0)
    answerable = (
        session != REJECTED_SESSION
        and isinstance(reply_to, str)
        and is_session_id(reply_to)
        and not is_reserved_session(reply_to)
    )
    rejected = stamp(
        InputRejected,
        InputRejectedData(
            kind=why.kind,
            reason=why.reason,
            errors=why.errors,
            idempotency_key=key if isinstance(key, str) else None,
            inbound_seq=raw.seq,
            size=len(raw.data),
            excerpt=raw.data[:EXCERPT_BYTES].decode("utf-8", "replace"),
            reply_to=reply_to if answerable else None,
            hops=hops if isinstance(hops, int) and not isinstance(hops, bool) and hops >= 0 else 0,
        ),
        envelope,
        event_id=ids("event"),
        time=now,
        source=source,
        causation_id=None,
    )
    ended = stamp(
        TurnEnded,
        TurnEndedData(
            status="failed",
            failure_class=FailureClass.INVALID_INPUT,
            reason=why.reason,
            next_action="fix the command as the reason says and publish it again with a "
            f"new idempotencyKey (raw command kept at inbound seq {raw.seq})",
        ),
        envelope,
        event_id=ids("ended"),
        time=now,
        source=source,
        causation_id=rejected.id,
    )
    return [rejected, ended]
