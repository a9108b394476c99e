"""Pure intake: one raw inbound command read into what it amounts to (`read`: a `Draft`
of its events and the questions only the shell can answer), and how each answer settles it.

Event ids are derived from the inbound stream sequence, so a redelivered command
yields the same ids and the log's dedup makes the retry a no-op. Checking a command and
recording its rejection are `check.py`'s; the accepted command's events, the session's
agent and a workflow's attach are here; the batch they go through is `decider.py`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar, assert_never

from turnstream.agents import AgentProfile
from turnstream.core.commands import (
    AnswerCommand,
    AttachCommand,
    AttachmentIn,
    AttachmentPolicy,
    InboundCommand,
    InterruptCommand,
    MessageCommand,
    SteerCommand,
)
from turnstream.core.events import (
    Envelope,
    EventBase,
    InputAccepted,
    InputAcceptedData,
    InputRejected,
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
from turnstream.gateway.attachments import DEFAULT_POLICY, recorded, refused
from turnstream.gateway.check import CommandIds, Inbound, Rejection, check, fields_of, rejected

E = TypeVar("E", bound=EventBase)


AgentLoader = Callable[[str], AgentProfile]
"""Agent name → its profile; `ValueError` or `FileNotFoundError` saying what is wrong."""

WorkflowLoader = Callable[[str, str], WorkflowDef]
"""(session id, workflow name) → the checked definition; `ValueError` or
`FileNotFoundError` saying what is wrong (the shell reads the files)."""


@dataclass(frozen=True, slots=True)
class AskRequested:
    """Whether the session asked the interaction an answer answers (its log holds the
    `InteractionRequested`)."""

    session_id: str
    interaction_id: str


@dataclass(frozen=True, slots=True)
class AskAgent:
    """Which agent the session already has (its log's `SessionConfigured`), if any."""

    session_id: str


@dataclass(frozen=True, slots=True)
class StoreAttachments:
    """Put a message's inline attachments into the object store and check the named ones
    are there as described; why not, if so."""

    attachments: tuple[AttachmentIn, ...]


Question = AskRequested | AskAgent | StoreAttachments
"""What a command's events wait on that only the shell can find out."""


@dataclass(frozen=True, slots=True)
class IntakeConfig:
    """What reading a command needs besides the command: the limits, this gateway's name,
    and the loaders of agent profiles and workflows (the shell reads their files)."""

    max_bytes: int
    source: str
    load_workflow: WorkflowLoader | None = None
    load_agent: AgentLoader | None = None
    attachments: AttachmentPolicy = DEFAULT_POLICY


@dataclass(frozen=True, slots=True)
class Draft:
    """One command read: the events it amounts to if each question it still asks is
    answered as hoped, and those questions, in the order they are asked."""

    raw: Inbound
    events: tuple[EventBase, ...]
    asks: tuple[Question, ...] = ()

    def answered(self, events: list[EventBase]) -> Draft:
        """The draft once its first question is answered: `events` now; the questions
        after it asked still unless it is rejected."""
        asks = () if isinstance(events[0], InputRejected) else self.asks[1:]
        return Draft(self.raw, tuple(events), asks)


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
    """Validate one inbound command; the events that record the outcome, every question
    it asks taken as answered as hoped."""
    config = IntakeConfig(max_bytes, source, load_workflow, load_agent, attachments)
    return list(read(raw, config, now).events)


def read(raw: Inbound, config: IntakeConfig, now: datetime) -> Draft:
    """One inbound command checked and drafted into its events and questions."""
    try:
        return _read(raw, config, now)
    except Exception as exc:  # a bug must not stall the inbound stream on one command
        why = Rejection(
            "intake_failed",
            f"the gateway failed on this command ({type(exc).__name__}: {exc}); it is kept "
            f"at inbound seq {raw.seq}: report it",
            [],
            {},
        )
        return Draft(raw, tuple(rejected(raw, why, CommandIds(raw), now, config.source)))


class _Facts:
    """Stamps the events of one accepted command: its envelope, ids derived from its seq."""

    def __init__(self, raw: Inbound, parsed: InboundCommand, now: datetime, source: str) -> None:
        self.raw, self.parsed, self.now, self.source = raw, parsed, now, source
        self.ids = CommandIds(raw)
        self.envelope = Envelope(
            parsed.session_id, parsed.chat_id, None, self.ids("trace"), parsed.idempotency_key
        )

    def __call__(
        self, cls: type[E], data: Any, turn_id: str | None = None, purpose: str = "event"
    ) -> E:
        return stamp(
            cls,
            data,
            self.envelope,
            event_id=self.ids(purpose),
            time=self.now,
            source=self.source,
            causation_id=None,
            turn_id=turn_id,
        )

    def rejected(self, why: Rejection) -> Draft:
        return Draft(self.raw, tuple(rejected(self.raw, why, self.ids, self.now, self.source)))


def _read(raw: Inbound, config: IntakeConfig, now: datetime) -> Draft:
    parsed = check(raw, max_bytes=config.max_bytes)
    if isinstance(parsed, Rejection):
        return Draft(raw, tuple(rejected(raw, parsed, CommandIds(raw), now, config.source)))
    fact = _Facts(raw, parsed, now, config.source)
    match parsed:
        case MessageCommand():
            return _message(fact, parsed, config)
        case SteerCommand():
            data = InputAcceptedData(
                kind=parsed.type,
                text=parsed.text,
                sender=parsed.sender,
                idempotency_key=parsed.idempotency_key,
                reply_to=parsed.reply_to,
                inbound_seq=raw.seq,
            )
            return Draft(raw, (fact(InputAccepted, data, turn_id=fact.ids("turn")),))
        case InterruptCommand():
            interrupt = InterruptReceivedData(
                mode=parsed.mode,
                sender=parsed.sender,
                idempotency_key=parsed.idempotency_key,
                inbound_seq=raw.seq,
            )
            return Draft(raw, (fact(InterruptReceived, interrupt),))
        case AnswerCommand():
            answer = InteractionAnsweredData(
                interaction_id=parsed.interaction_id,
                decision=parsed.decision,
                reason=parsed.reason,
                sender=parsed.sender,
                idempotency_key=parsed.idempotency_key,
                inbound_seq=raw.seq,
            )
            asks = (AskRequested(parsed.session_id, parsed.interaction_id),)
            return Draft(raw, (fact(InteractionAnswered, answer),), asks)
        case AttachCommand():
            return _attach(fact, parsed, config.load_workflow)
        case _:
            assert_never(parsed)


def _message(fact: _Facts, parsed: MessageCommand, config: IntakeConfig) -> Draft:
    """A message: the session configured first when it names an agent (asking which one
    the session has), its attachments stored (asked) before it is accepted."""
    configured: list[EventBase] = []
    asks: list[Question] = []
    if parsed.agent is not None:
        try:
            profile = _load(config.load_agent, parsed.agent)
        except (ValueError, FileNotFoundError) as exc:
            return fact.rejected(Rejection("unknown_agent", str(exc), [], fields_of(parsed)))
        setup = configured_data(profile, parsed.idempotency_key)
        configured.append(fact(SessionConfigured, setup, purpose="configured"))
        asks.append(AskAgent(parsed.session_id))
    why = refused(parsed, config.attachments)
    if why is not None:
        return fact.rejected(why)
    if parsed.attachments:
        asks.append(StoreAttachments(tuple(parsed.attachments)))
    data = InputAcceptedData(
        kind=parsed.type,
        text=parsed.text,
        sender=parsed.sender,
        idempotency_key=parsed.idempotency_key,
        reply_to=parsed.reply_to,
        inbound_seq=fact.raw.seq,
        agent=parsed.agent,
        in_reply_to=parsed.in_reply_to,
        hops=parsed.hops,
        parent=parsed.parent,
        outcome=parsed.outcome,
        attachments=recorded(parsed),
    )
    accepted = fact(InputAccepted, data, turn_id=fact.ids("turn"))
    return Draft(fact.raw, (*configured, accepted), tuple(asks))


def _attach(fact: _Facts, parsed: AttachCommand, load_workflow: WorkflowLoader | None) -> Draft:
    if load_workflow is None:
        return fact.rejected(_no_workflows(parsed))
    try:
        definition = load_workflow(parsed.session_id, parsed.workflow)
    except (ValueError, FileNotFoundError) as exc:
        invalid = Rejection(
            "workflow_invalid",
            f"cannot attach workflow {parsed.workflow!r}: {exc}",
            getattr(exc, "errors", []),
            fields_of(parsed),
        )
        return fact.rejected(invalid)
    attached = WorkflowAttachedData(
        run_id=fact.ids("run"),
        workflow=parsed.workflow,
        definition=definition.to_dict(),
        ctx=parsed.ctx,
        sender=parsed.sender,
        idempotency_key=parsed.idempotency_key,
        inbound_seq=fact.raw.seq,
    )
    return Draft(fact.raw, (fact(WorkflowAttached, attached),))


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
                _fields_of_accepted(accepted),
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


def reject_unstored(
    raw: Inbound, accepted: InputAccepted, problem: str, *, now: datetime, source: str
) -> list[EventBase]:
    """The events that replace a message's when an attachment of it is not in the object
    store as described (the shell looked): a rejection naming it (the command stays at its
    inbound seq: nothing is lost)."""
    why = Rejection(
        "attachment",
        f"{problem}; nothing of the message was taken",
        [problem],
        _fields_of_accepted(accepted),
    )
    return rejected(raw, why, CommandIds(raw), now, source)


def _fields_of_accepted(accepted: InputAccepted) -> dict[str, Any]:
    """`fields_of` the command `accepted` records."""
    return {
        "sessionId": accepted.session_id,
        "chatId": accepted.chat_id,
        "idempotencyKey": accepted.data.idempotency_key,
        "replyTo": accepted.data.reply_to,
        "hops": accepted.data.hops,
    }
