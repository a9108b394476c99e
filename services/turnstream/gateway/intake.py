"""Pure intake: raw inbound bytes → the events to append (accepted or rejected).

Event ids are derived from the inbound stream sequence, so a redelivered command
yields the same ids and the log's dedup makes the retry a no-op.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import orjson
from pydantic import ValidationError

from turnstream.agents import AgentProfile
from turnstream.core.commands import (
    COMMAND_ADAPTER,
    COMMAND_TYPES,
    AnswerCommand,
    AttachCommand,
    InboundCommand,
    InterruptCommand,
    MessageCommand,
    SteerCommand,
)
from turnstream.core.events import (
    Envelope,
    EventBase,
    FailureClass,
    InputAccepted,
    InputAcceptedData,
    InputRejected,
    InputRejectedData,
    InteractionAnswered,
    InteractionAnsweredData,
    InterruptReceived,
    InterruptReceivedData,
    RejectionKind,
    SessionConfigured,
    SessionConfiguredData,
    TurnEnded,
    TurnEndedData,
    WorkflowAttached,
    WorkflowAttachedData,
    stamp,
)
from turnstream.core.ids import derived_id
from turnstream.core.subjects import REJECTED_SESSION, is_reserved_session, is_session_id
from turnstream.core.workflow.definition import WorkflowDef

EXCERPT_BYTES = 512

E = TypeVar("E", bound=EventBase)


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


@dataclass(frozen=True, slots=True)
class Rejection:
    kind: RejectionKind
    reason: str
    errors: list[str]
    fields: dict[str, Any]


AgentLoader = Callable[[str], AgentProfile]
"""Agent name → its profile; `ValueError` or `FileNotFoundError` saying what is wrong."""

WorkflowLoader = Callable[[str, str], WorkflowDef]
"""(session id, workflow name) → the checked definition; `ValueError` or
`FileNotFoundError` saying what is wrong (the shell reads the files)."""


def intake(
    raw: Inbound,
    *,
    max_bytes: int,
    now: datetime,
    source: str,
    load_workflow: WorkflowLoader | None = None,
    load_agent: AgentLoader | None = None,
) -> list[EventBase]:
    """Validate one inbound command; return the events that record the outcome."""
    try:
        return _intake(raw, max_bytes, now, source, load_workflow, load_agent)
    except Exception as exc:  # a bug must not stall the inbound stream on one command
        why = Rejection(
            "intake_failed",
            f"the gateway failed on this command ({type(exc).__name__}: {exc}); it is kept "
            f"at inbound seq {raw.seq}: report it",
            [],
            {},
        )
        return _rejected(raw, why, _Ids(raw), now, source)


def _intake(
    raw: Inbound,
    max_bytes: int,
    now: datetime,
    source: str,
    load_workflow: WorkflowLoader | None,
    load_agent: AgentLoader | None,
) -> list[EventBase]:
    parsed = check(raw, max_bytes=max_bytes)
    ids = _Ids(raw)
    if isinstance(parsed, Rejection):
        return _rejected(raw, parsed, ids, now, source)
    envelope = Envelope(
        parsed.session_id, parsed.chat_id, None, ids("trace"), parsed.idempotency_key
    )

    def fact(cls: type[E], data: Any, turn_id: str | None = None, purpose: str = "event") -> E:
        return stamp(
            cls,
            data,
            envelope,
            event_id=ids(purpose),
            time=now,
            source=source,
            causation_id=None,
            turn_id=turn_id,
        )

    match parsed:
        case MessageCommand():
            configured: list[EventBase] = []
            if parsed.agent is not None:
                try:
                    profile = _load(load_agent, parsed.agent)
                except (ValueError, FileNotFoundError) as exc:
                    unknown = Rejection("unknown_agent", str(exc), [], _fields_of(parsed))
                    return _rejected(raw, unknown, ids, now, source)
                setup = configured_data(profile, parsed.idempotency_key)
                configured.append(fact(SessionConfigured, setup, purpose="configured"))
            data = InputAcceptedData(
                kind=parsed.type,
                text=parsed.text,
                sender=parsed.sender,
                idempotency_key=parsed.idempotency_key,
                reply_to=parsed.reply_to,
                inbound_seq=raw.seq,
                agent=parsed.agent,
                in_reply_to=parsed.in_reply_to,
                hops=parsed.hops,
                parent=parsed.parent,
                outcome=parsed.outcome,
            )
            return [*configured, fact(InputAccepted, data, turn_id=ids("turn"))]
        case SteerCommand():
            data = InputAcceptedData(
                kind=parsed.type,
                text=parsed.text,
                sender=parsed.sender,
                idempotency_key=parsed.idempotency_key,
                reply_to=parsed.reply_to,
                inbound_seq=raw.seq,
            )
            return [fact(InputAccepted, data, turn_id=ids("turn"))]
        case InterruptCommand():
            interrupt = InterruptReceivedData(
                mode=parsed.mode,
                sender=parsed.sender,
                idempotency_key=parsed.idempotency_key,
                inbound_seq=raw.seq,
            )
            return [fact(InterruptReceived, interrupt)]
        case AnswerCommand():
            answer = InteractionAnsweredData(
                interaction_id=parsed.interaction_id,
                decision=parsed.decision,
                reason=parsed.reason,
                sender=parsed.sender,
                idempotency_key=parsed.idempotency_key,
                inbound_seq=raw.seq,
            )
            return [fact(InteractionAnswered, answer)]
        case AttachCommand():
            if load_workflow is None:
                return _rejected(raw, _no_workflows(parsed), ids, now, source)
            try:
                definition = load_workflow(parsed.session_id, parsed.workflow)
            except (ValueError, FileNotFoundError) as exc:
                invalid = Rejection(
                    "workflow_invalid",
                    f"cannot attach workflow {parsed.workflow!r}: {exc}",
                    getattr(exc, "errors", []),
                    _fields_of(parsed),
                )
                return _rejected(raw, invalid, ids, now, source)
            attached = WorkflowAttachedData(
                run_id=ids("run"),
                workflow=parsed.workflow,
                definition=definition.to_dict(),
                ctx=parsed.ctx,
                sender=parsed.sender,
                idempotency_key=parsed.idempotency_key,
                inbound_seq=raw.seq,
            )
            return [fact(WorkflowAttached, attached)]


def _load(load_agent: AgentLoader | None, name: str) -> AgentProfile:
    if load_agent is None:
        raise ValueError(f"this gateway knows no agent profiles; no agent {name!r}")
    return load_agent(name)


def configured_data(profile: AgentProfile, idempotency_key: str) -> SessionConfiguredData:
    """The profile as `SessionConfigured` records it (a replay needs no profile file)."""
    return SessionConfiguredData(
        agent=profile.name,
        description=profile.description,
        provider=profile.provider,
        model=profile.model,
        tools=list(profile.tools) if profile.tools is not None else None,
        security_mode=profile.security_mode,
        max_iterations=profile.max_iterations,
        system_prompt=profile.system_prompt,
        idempotency_key=idempotency_key,
        fallback_model=profile.fallback_model,
        fallback_provider=profile.fallback_provider,
    )


def settle_agent(
    raw: Inbound, decided: list[EventBase], current: str | None, *, now: datetime, source: str
) -> list[EventBase]:
    """`decided` given the agent the session already has (`current`, from its log): the
    first message that names an agent configures the session; naming the same one again
    changes nothing; naming another is rejected (`agent_conflict`), nothing accepted."""
    match decided:
        case [SessionConfigured() as configured, InputAccepted() as accepted]:
            wanted = configured.data.agent
            if current is None:
                return decided
            if current == wanted:
                return [accepted]
            why = Rejection(
                "agent_conflict",
                f"session {accepted.session_id!r} talks to agent {current!r}; a message "
                f"cannot switch it to {wanted!r}: use another session id for {wanted!r}, or "
                "leave `agent` out",
                [f"agent: the session's agent is {current!r}"],
                {
                    "sessionId": accepted.session_id,
                    "chatId": accepted.chat_id,
                    "idempotencyKey": accepted.data.idempotency_key,
                    "replyTo": accepted.data.reply_to,
                    "hops": accepted.data.hops,
                },
            )
            return _rejected(raw, why, _Ids(raw), now, source)
    return decided


def _no_workflows(parsed: AttachCommand) -> Rejection:
    return Rejection(
        "unsupported",
        "this gateway was started without workflow definitions; nothing was changed",
        [],
        _fields_of(parsed),
    )


def _fields_of(parsed: InboundCommand) -> dict[str, Any]:
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
    fields = {
        k: body[k]
        for k in ("sessionId", "chatId", "idempotencyKey", "replyTo", "hops")
        if k in body
    }
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
            "schema", f"command does not match the '{kind}' schema: {errors[0]}", errors, fields
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


class _Ids:
    def __init__(self, raw: Inbound) -> None:
        self.ms = int(raw.stored_at.timestamp() * 1000)
        self.key = f"{raw.stream}:{raw.seq}"

    def __call__(self, purpose: str) -> str:
        return derived_id(self.key, purpose, self.ms)


def _rejected(
    raw: Inbound, why: Rejection, ids: _Ids, now: datetime, source: str
) -> list[EventBase]:
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


def reject_unknown_answer(
    raw: Inbound, answered: InteractionAnswered, *, now: datetime, source: str
) -> list[EventBase]:
    """The events that replace `answered` when its session never asked `interactionId`
    (the shell looks it up in the session's log): a rejection naming the id."""
    interaction = answered.data.interaction_id
    why = Rejection(
        "unknown_interaction",
        f"no interaction {interaction!r} was requested in session {answered.session_id!r}; "
        "answer an id from an InteractionRequested event (`turnstream approvals` lists them)",
        [f"interactionId: unknown id {interaction!r}"],
        {
            "sessionId": answered.session_id,
            "chatId": answered.chat_id,
            "idempotencyKey": answered.data.idempotency_key,
        },
    )
    return _rejected(raw, why, _Ids(raw), now, source)
