"""Inbound commands: what gateways and agents publish to `<prefix>.in.<sessionId>`.

Commands are requests, not facts: the gateway validates them and appends the fact
(`InputAccepted`, `InterruptReceived`, …) or an `InputRejected` that says why.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, StringConstraints, TypeAdapter

from turnstream.core.events import ParentRef, ReplyOutcome, Sender, WireModel
from turnstream.core.subjects import (
    AGENT_DOOR,
    ANSWER_DOOR,
    REJECTED_SESSION,
    SESSION_ID_PATTERN,
    is_reserved_session,
)


def _not_reserved(value: str) -> str:
    if is_reserved_session(value):
        raise ValueError(f"session id {value!r} is reserved for unroutable input")
    return value


SessionId = Annotated[
    str,
    StringConstraints(pattern=SESSION_ID_PATTERN),
    AfterValidator(_not_reserved),
    Field(json_schema_extra={"not": {"const": REJECTED_SESSION}}),
]
MAX_TEXT_CHARS = 100_000
AGENT_NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
"""An agent's name: its profile file's name in TURNSTREAM_AGENTS, never a path."""
AgentName = Annotated[str, StringConstraints(pattern=AGENT_NAME_PATTERN)]


class CommandBase(WireModel):
    session_id: SessionId
    """Must equal the session token of the subject it was published on."""
    chat_id: Annotated[str, Field(min_length=1, max_length=256)]
    sender: Sender
    idempotency_key: Annotated[str, Field(min_length=1, max_length=256)]
    """Also the `Nats-Msg-Id` of the publish. A retry is a no-op: the gateway remembers each
    (sessionId, idempotencyKey) as long as inbound commands are kept
    (TURNSTREAM_INBOUND_MAX_AGE_DAYS, 7 days), whatever the `Nats-Msg-Id`."""
    reply_to: SessionId | None = None
    """Session to deliver the reply to (agent-to-agent); `null` for none."""


class MessageCommand(CommandBase):
    """Start a turn (or queue one behind the active turn)."""

    type: Literal["message"]
    text: Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)]
    agent: AgentName | None = None
    """The agent profile to talk to; the first message that names one fixes the session's
    agent (`SessionConfigured`), a later different one is rejected (`agent_conflict`)."""
    in_reply_to: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    """The idempotency key of the message this one answers."""
    hops: Annotated[int, Field(ge=0)] = 0
    """Agent-to-agent deliveries that came before this message (DESIGN §11)."""
    parent: ParentRef | None = None
    """Set by the runtime on a sub-turn's input: the parent turn and its `spawn` call."""
    outcome: ReplyOutcome | None = None
    """Set by the runtime on a reply: how the turn it answers for ended."""


class SteerCommand(CommandBase):
    """Inject text into the active turn before its next model call."""

    type: Literal["steer"]
    text: Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)]


class InterruptCommand(CommandBase):
    """Stop the active turn: `graceful` summarises, `hard` cancels at once."""

    type: Literal["interrupt"]
    mode: Literal["graceful", "hard"] = "graceful"


class AnswerCommand(CommandBase):
    """Answer a pending interaction (a tool-call approval prompt)."""

    type: Literal["answer"]
    interaction_id: Annotated[str, Field(min_length=1)]
    decision: Literal["approve", "deny"]
    reason: str | None = None


class AttachCommand(CommandBase):
    """Attach a workflow (state machine) to the session."""

    type: Literal["attach"]
    workflow: Annotated[str, Field(min_length=1)]
    ctx: dict[str, Any] = Field(default_factory=dict)


InboundCommand = Annotated[
    MessageCommand | SteerCommand | InterruptCommand | AnswerCommand | AttachCommand,
    Field(discriminator="type"),
]

COMMAND_ADAPTER: TypeAdapter[InboundCommand] = TypeAdapter(InboundCommand)
COMMAND_TYPES = ("message", "steer", "interrupt", "answer", "attach")
AGENT_COMMAND_TYPES = ("message", "interrupt")
"""What the runtime's own inbound subject (`Subjects.inbound_agent`) takes: what the
turn-runner sends. A person's answer, a steer or an attach comes from outside."""
ANSWER_COMMAND_TYPES = ("answer",)
"""What the people's answer door (`Subjects.inbound_answer`) takes: an approver decides a
prompt; starting, steering or interrupting a turn is a sender's or the admin's."""
DOOR_COMMANDS = {AGENT_DOOR: AGENT_COMMAND_TYPES, ANSWER_DOOR: ANSWER_COMMAND_TYPES}
"""Each door (`core.subjects.DOORS`) and the commands the gateway takes on it."""
