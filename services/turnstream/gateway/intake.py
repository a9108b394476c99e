"""Pure intake: raw inbound bytes → the events to append (accepted or rejected).

Event ids are derived from the inbound stream sequence, so a redelivered command
yields the same ids and the log's dedup makes the retry a no-op. Checking a command and
recording its rejection are `check.py`'s; the accepted command's events, the session's
agent and a workflow's attach are here.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from turnstream.agents import AgentProfile
from turnstream.core.commands import (
    AnswerCommand,
    AttachCommand,
    InterruptCommand,
    MessageCommand,
    SteerCommand,
)
from turnstream.core.events import (
    Envelope,
    EventBase,
    InputAccepted,
    InputAcceptedData,
    InteractionAnswered,
    InteractionAnsweredData,
    InterruptReceived,
    InterruptReceivedData,
    SessionConfigured,
    SessionConfiguredData,
    WorkflowAttached,
    WorkflowAttachedData,
    stamp,
)
from turnstream.core.workflow.definition import WorkflowDef
from turnstream.gateway.attachments import DEFAULT_POLICY, AttachmentPolicy, recorded, refused
from turnstream.gateway.check import CommandIds, Inbound, Rejection, check, fields_of, rejected

E = TypeVar("E", bound=EventBase)


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
    attachments: AttachmentPolicy = DEFAULT_POLICY,
) -> list[EventBase]:
    """Validate one inbound command; return the events that record the outcome."""
    try:
        return _intake(raw, max_bytes, now, source, load_workflow, load_agent, attachments)
    except Exception as exc:  # a bug must not stall the inbound stream on one command
        why = Rejection(
            "intake_failed",
            f"the gateway failed on this command ({type(exc).__name__}: {exc}); it is kept "
            f"at inbound seq {raw.seq}: report it",
            [],
            {},
        )
        return rejected(raw, why, CommandIds(raw), now, source)


def _intake(
    raw: Inbound,
    max_bytes: int,
    now: datetime,
    source: str,
    load_workflow: WorkflowLoader | None,
    load_agent: AgentLoader | None,
    attachments: AttachmentPolicy,
) -> list[EventBase]:
    parsed = check(raw, max_bytes=max_bytes)
    ids = CommandIds(raw)
    if isinstance(parsed, Rejection):
        return rejected(raw, parsed, ids, now, source)
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
                    unknown = Rejection("unknown_agent", str(exc), [], fields_of(parsed))
                    return rejected(raw, unknown, ids, now, source)
                setup = configured_data(profile, parsed.idempotency_key)
                configured.append(fact(SessionConfigured, setup, purpose="configured"))
            why = refused(parsed, attachments)
            if why is not None:
                return rejected(raw, why, ids, now, source)
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
                attachments=recorded(parsed),
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
                return rejected(raw, _no_workflows(parsed), ids, now, source)
            try:
                definition = load_workflow(parsed.session_id, parsed.workflow)
            except (ValueError, FileNotFoundError) as exc:
                invalid = Rejection(
                    "workflow_invalid",
                    f"cannot attach workflow {parsed.workflow!r}: {exc}",
                    getattr(exc, "errors", []),
                    fields_of(parsed),
                )
                return rejected(raw, invalid, ids, now, source)
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
        budget=profile.budget,
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
            return rejected(raw, why, CommandIds(raw), now, source)
    return decided


def _no_workflows(parsed: AttachCommand) -> Rejection:
    return Rejection(
        "unsupported",
        "this gateway was started without workflow definitions; nothing was changed",
        [],
        fields_of(parsed),
    )


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
    return rejected(raw, why, CommandIds(raw), now, source)
