"""Inbound commands: what gateways and agents publish to `<prefix>.in.<sessionId>`.

Commands are requests, not facts: the gateway validates them and appends the fact
(`InputAccepted`, `InterruptReceived`, …) or an `InputRejected` that says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, StringConstraints, TypeAdapter

from turnstream.core.events import Attachment, ParentRef, ReplyOutcome, Sender, WireModel
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


MAX_ATTACHMENTS = 10
ATTACHMENT_TYPES = (
    "image/png",
    "image/jpeg",
    "image/gif",
    "image/webp",
    "application/pdf",
    "text/plain",
    "text/csv",
    "text/markdown",
    "application/json",
)
"""The media types a message's attachments may have unless TURNSTREAM_ATTACHMENT_TYPES
says otherwise."""
INLINE_MAX_BYTES = 128 * 1024
"""An attachment's bytes may come inline (base64 in `data`, within TURNSTREAM_MAX_INPUT_BYTES's
default of 256 KiB) up to this; a larger one is put
into the object store first (`att/<sha256>`) and named by its hash alone."""


@dataclass(frozen=True, slots=True)
class AttachmentPolicy:
    """Which files a message may carry: the one place every door (the gateway, a chat
    channel, an upload) reads the limits from (`Settings.attachment_policy`)."""

    max_bytes: int = 20 * 1024 * 1024
    """`TURNSTREAM_ATTACHMENT_MAX_BYTES`: the largest attachment taken."""
    types: tuple[str, ...] = ATTACHMENT_TYPES
    """`TURNSTREAM_ATTACHMENT_TYPES`: the media types taken."""

    def refusal(self, media_type: str, size: int | None) -> str | None:
        """Why a file of this media type and size is not taken; None: it is (`size` None:
        not known yet, checked once it is)."""
        if media_type not in self.types:
            return (
                f"media type {media_type} is not taken (TURNSTREAM_ATTACHMENT_TYPES: "
                f"{', '.join(self.types)})"
            )
        return None if size is None else self.oversize(size)

    def oversize(self, size: int, *, so_far: bool = False) -> str | None:
        """Why a file of `size` bytes is not taken; None: it is. `so_far`: the bytes a
        stream brought until now, not the file's size (not said, then)."""
        if size <= self.max_bytes:
            return None
        limit = f"over the limit of {self.max_bytes} bytes (TURNSTREAM_ATTACHMENT_MAX_BYTES)"
        return limit if so_far else f"{size} bytes is {limit}"


class AttachmentIn(Attachment):
    """A file a message carries: described, and either inline (`data`, base64, up to
    `INLINE_MAX_BYTES`) or already put into the object store as `att/<sha256>` (no `data`).
    The gateway checks the type, the size and the hash against the bytes either way."""

    data: Annotated[str, Field(max_length=(INLINE_MAX_BYTES * 4) // 3 + 4)] | None = None
    """The bytes, base64 (standard alphabet, padded)."""


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
    attachments: Annotated[list[AttachmentIn], Field(max_length=MAX_ATTACHMENTS)] = Field(
        default_factory=list
    )
    """Files and images for the turn (docs/contract.md#attachments)."""


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
