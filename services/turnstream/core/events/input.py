"""Input events: what the gateway accepted, rejected or recorded, and how input is parked."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from turnstream.core.events.agents import ParentRef, ReplyOutcome
from turnstream.core.events.base import EventBase, Sender, WireModel

ATTACHMENT_PREFIX = "att/"
"""Attachments live in the object store (`ts_blobs`) as `att/<sha256 hex>`: content
addressed, so a turn's attachment is found by what it is, and no other object (a tool's
large result, an archive) can be passed off as one."""


class Attachment(WireModel):
    """A file a message carried, as the log records it: what it is and where its bytes
    are (never the bytes)."""

    name: Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[^/\\\x00]+$")]
    """The file's name as the sender gave it (no path)."""
    media_type: Annotated[str, Field(pattern=r"^[a-z0-9.+-]+/[a-z0-9.+-]+$", max_length=128)]
    size: Annotated[int, Field(ge=0)]
    """Bytes."""
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    """Lowercase hex of the bytes' SHA-256."""

    @property
    def object(self) -> str:
        """Its name in the object store."""
        return ATTACHMENT_PREFIX + self.sha256


class InputAcceptedData(WireModel):
    kind: Literal["message", "steer"]
    text: str
    sender: Sender
    idempotency_key: str
    reply_to: str | None = None
    """Session that wants the reply (agent to agent)."""
    inbound_seq: int
    """Sequence of the raw command in the inbound stream."""
    agent: str | None = None
    """The agent the message named (the session's, fixed by `SessionConfigured`)."""
    in_reply_to: str | None = None
    """The idempotency key of the message this one answers (agent to agent)."""
    hops: int = 0
    """Agent-to-agent deliveries before this message (a reply is one more)."""
    parent: ParentRef | None = None
    """Set on a sub-turn's input: the turn and `spawn` call it comes from."""
    outcome: ReplyOutcome | None = None
    """Set on a reply: how the turn it comes from ended."""
    attachments: list[Attachment] | None = None
    """Files the message carried, stored in the object store before this was appended."""


class InputAccepted(EventBase):
    type: Literal["InputAccepted"] = "InputAccepted"
    data: InputAcceptedData


RejectionKind = Literal[
    "not_json",
    "schema",
    "bad_session_id",
    "oversize",
    "unknown_type",
    "unsupported",
    "workflow_invalid",
    "unknown_interaction",
    "unknown_agent",
    "agent_conflict",
    "intake_failed",
    "not_permitted",
    "attachment",
]
"""`intake_failed`: the gateway itself failed on the command (a bug); the command is
rejected rather than redelivered for ever, and stays at its inbound seq for a report."""


class InputRejectedData(WireModel):
    kind: RejectionKind
    """Which check failed."""
    reason: str
    """One line for people: what is wrong and how to fix it."""
    errors: list[str] = Field(default_factory=list)
    """Field-level details (schema errors)."""
    idempotency_key: str | None = None
    inbound_seq: int
    """The raw command stays in the inbound stream at this sequence: nothing is lost."""
    size: int
    excerpt: str
    """The first bytes of the payload, decoded leniently."""
    reply_to: str | None = None
    """The command's `replyTo`, when it is a valid session id: the sender hears back there
    (the turn-runner delivers the rejection as a reply, DESIGN §11)."""
    hops: int = 0


class InputRejected(EventBase):
    type: Literal["InputRejected"] = "InputRejected"
    data: InputRejectedData


class SteeringInjectedData(WireModel):
    input_id: str
    text: str


class SteeringInjected(EventBase):
    type: Literal["SteeringInjected"] = "SteeringInjected"
    data: SteeringInjectedData


class FollowUpQueuedData(WireModel):
    input_id: str
    """The `InputAccepted` that waits for the active turn to end."""
    behind_turn_id: str


class FollowUpQueued(EventBase):
    type: Literal["FollowUpQueued"] = "FollowUpQueued"
    data: FollowUpQueuedData


class InterruptReceivedData(WireModel):
    mode: Literal["graceful", "hard"]
    sender: Sender
    idempotency_key: str
    inbound_seq: int


class InterruptReceived(EventBase):
    type: Literal["InterruptReceived"] = "InterruptReceived"
    data: InterruptReceivedData
