"""The log's event kinds: frozen pydantic models with one envelope (DESIGN §2).

Every event is a past-tense fact. On the wire field names are camelCase; `type` is the
discriminator of the `Event` union and `EVENT_ADAPTER` is the one decoder. Old schema
versions are upgraded by `upcast` (pure) before validation, so a log written today
replays tomorrow.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from pydantic.alias_generators import to_camel

SCHEMA_VERSION = 1


class WireModel(BaseModel):
    """Base of everything on the wire: immutable, strict about unknown fields, camelCase."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        use_attribute_docstrings=True,
    )


class Stage(StrEnum):
    """The stages of one turn, each bracketed by `StagePreFired`/`StagePostFired`."""

    RECEIVE_INPUT = "RECEIVE_INPUT"
    COMPOSE_REQUEST = "COMPOSE_REQUEST"
    SEND_REQUEST = "SEND_REQUEST"
    STREAM_RESPONSE = "STREAM_RESPONSE"
    TOOL_CALL = "TOOL_CALL"
    RENDER = "RENDER"


class FailureClass(StrEnum):
    """Why a turn did not complete."""

    INVALID_INPUT = "invalid_input"
    POLICY_DENIED = "policy_denied"
    TOOL_RUNTIME_ERROR = "tool_runtime_error"
    TIMEOUT = "timeout"
    PROVIDER_ERROR = "provider_error"
    REPORT_MISSING = "report_missing"
    LIMIT_EXCEEDED = "limit_exceeded"
    INTERRUPTED = "interrupted"
    RECOVERED = "recovered"


TurnStatus = Literal["completed", "failed", "denied"]
StageOutcome = Literal["ok", "failed", "skipped"]


class Sender(WireModel):
    """Who sent an input. Humans and agents take the same path; the kind is data."""

    kind: Literal["human", "agent"]
    id: Annotated[str, Field(min_length=1, max_length=256)]


class EventBase(WireModel):
    """The envelope every log event carries."""

    id: str
    """Unique event id (UUIDv7); also the `Nats-Msg-Id`, so a retried append is a no-op."""
    type: str
    """The event kind (the discriminator); each kind narrows it to its own name."""
    time: datetime
    """When the fact was recorded (RFC 3339, UTC)."""
    session_id: str
    chat_id: str
    turn_id: str | None = None
    """The turn this event belongs to; absent for session-level events."""
    trace_id: str
    correlation_id: str
    causation_id: str | None = None
    """Id of the event that caused this one."""
    source: str
    """Service and instance that appended it, e.g. `turn-runner/host-1234`."""
    schema_version: int = SCHEMA_VERSION


# ---------------------------------------------------------------- input


class InputAcceptedData(WireModel):
    kind: Literal["message", "steer"]
    text: str
    sender: Sender
    idempotency_key: str
    reply_to: str | None = None
    """Session that wants the reply (agent to agent)."""
    inbound_seq: int
    """Sequence of the raw command in the inbound stream."""


class InputAccepted(EventBase):
    type: Literal["InputAccepted"] = "InputAccepted"
    data: InputAcceptedData


RejectionKind = Literal[
    "not_json", "schema", "bad_session_id", "oversize", "unknown_type", "unsupported"
]


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


# ---------------------------------------------------------------- turn


class SessionTurnStartData(WireModel):
    input_id: str
    text: str
    sender: Sender


class SessionTurnStart(EventBase):
    type: Literal["SessionTurnStart"] = "SessionTurnStart"
    data: SessionTurnStartData


class StagePreFiredData(WireModel):
    stage: Stage
    iteration: int
    """Continuation round of the turn, from 1."""


class StagePreFired(EventBase):
    type: Literal["StagePreFired"] = "StagePreFired"
    data: StagePreFiredData


class StagePostFiredData(WireModel):
    stage: Stage
    iteration: int
    outcome: StageOutcome


class StagePostFired(EventBase):
    type: Literal["StagePostFired"] = "StagePostFired"
    data: StagePostFiredData


class RenderEmittedData(WireModel):
    text: str
    reply_to: str | None = None


class RenderEmitted(EventBase):
    type: Literal["RenderEmitted"] = "RenderEmitted"
    data: RenderEmittedData


class TurnEndedData(WireModel):
    status: TurnStatus
    failure_class: FailureClass | None = None
    reason: str | None = None
    next_action: str | None = None
    """What the sender or operator can do next (always set when not completed)."""
    reply: str | None = None
    iterations: int = 0


class TurnEnded(EventBase):
    type: Literal["TurnEnded"] = "TurnEnded"
    data: TurnEndedData


class SessionTurnEndData(WireModel):
    status: TurnStatus


class SessionTurnEnd(EventBase):
    type: Literal["SessionTurnEnd"] = "SessionTurnEnd"
    data: SessionTurnEndData


# ---------------------------------------------------------------- provider


class TextBlock(WireModel):
    type: Literal["text"] = "text"
    text: str


class AssistantMessage(WireModel):
    role: Literal["assistant"] = "assistant"
    content: list[TextBlock]

    @property
    def text(self) -> str:
        return "".join(block.text for block in self.content)


class Usage(WireModel):
    input_tokens: int = 0
    output_tokens: int = 0


StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]


class ProviderRequestStartedData(WireModel):
    provider: str
    model: str
    iteration: int
    call_index: int
    """How many provider calls this session made before this one (scripted replies key on it)."""
    message_count: int


class ProviderRequestStarted(EventBase):
    type: Literal["ProviderRequestStarted"] = "ProviderRequestStarted"
    data: ProviderRequestStartedData


class ProviderRequestCompletedData(WireModel):
    message: AssistantMessage
    usage: Usage
    stop_reason: StopReason
    iteration: int


class ProviderRequestCompleted(EventBase):
    type: Literal["ProviderRequestCompleted"] = "ProviderRequestCompleted"
    data: ProviderRequestCompletedData


class ProviderRequestFailedData(WireModel):
    error_class: str
    """e.g. `rate_limit`, `overloaded`, `server_error`, `connection`, `bad_request`."""
    message: str
    retryable: bool
    status_code: int | None = None
    iteration: int


class ProviderRequestFailed(EventBase):
    type: Literal["ProviderRequestFailed"] = "ProviderRequestFailed"
    data: ProviderRequestFailedData


class ProviderRetryData(WireModel):
    attempt: int
    delay_ms: int
    error_class: str
    message: str


class ProviderRetry(EventBase):
    type: Literal["ProviderRetry"] = "ProviderRetry"
    data: ProviderRetryData


class ContextCompactedData(WireModel):
    dropped_messages: int
    tokens_before: int
    tokens_after: int


class ContextCompacted(EventBase):
    type: Literal["ContextCompacted"] = "ContextCompacted"
    data: ContextCompactedData


# ---------------------------------------------------------------- the union

Event = Annotated[
    InputAccepted
    | InputRejected
    | SteeringInjected
    | FollowUpQueued
    | InterruptReceived
    | SessionTurnStart
    | StagePreFired
    | StagePostFired
    | RenderEmitted
    | TurnEnded
    | SessionTurnEnd
    | ProviderRequestStarted
    | ProviderRequestCompleted
    | ProviderRequestFailed
    | ProviderRetry
    | ContextCompacted,
    Field(discriminator="type"),
]

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)

EVENT_TYPES: dict[str, type[EventBase]] = {
    cls.model_fields["type"].default: cls
    for cls in EventBase.__subclasses__()
    if "type" in cls.model_fields
}


def upcast(raw: dict[str, Any]) -> dict[str, Any]:
    """Upgrade an event dict written by an older schema version to the current one."""
    version = raw.get("schemaVersion", 1)
    if version > SCHEMA_VERSION:
        raise ValueError(
            f"event schemaVersion {version} is newer than this build understands "
            f"({SCHEMA_VERSION}); upgrade turnstream"
        )
    return raw


def encode(event: EventBase) -> bytes:
    """Event → wire bytes (camelCase JSON)."""
    return event.__pydantic_serializer__.to_json(event, by_alias=True, exclude_none=True)


def decode(data: bytes) -> Event:
    """Wire bytes → event. Fast path for current-version events; upcasts older ones."""
    if b'"schemaVersion":1,' in data or b'"schemaVersion":1}' in data:
        return EVENT_ADAPTER.validate_json(data)
    return EVENT_ADAPTER.validate_python(upcast(orjson.loads(data)))
