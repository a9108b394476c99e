"""The envelope and the vocabulary every event kind shares."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

SCHEMA_VERSION = 2


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
    STORAGE_FULL = "storage_full"
    """The log refused the turn's events for want of storage (JetStream's limit reached);
    the turn ended once its end could be appended. Added in schema version 1 compatibly:
    a reader that does not know it sees an unknown failure class of a failed turn."""
    BUDGET_EXCEEDED = "budget_exceeded"
    """The next model call could have taken the turn or its session over a token or dollar
    budget: the turn ended without it (added compatibly, as `storage_full`)."""


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


E = TypeVar("E", bound=EventBase)


@dataclass(frozen=True, slots=True)
class Envelope:
    """What the events about one thing share: the session, chat, turn and trace they belong
    to and the correlation id their sender matches them by."""

    session_id: str
    chat_id: str
    turn_id: str | None
    trace_id: str
    correlation_id: str

    @classmethod
    def of(cls, event: EventBase) -> Envelope:
        """The envelope of `event`: a fact about it is filed where it is."""
        return cls(
            event.session_id, event.chat_id, event.turn_id, event.trace_id, event.correlation_id
        )


def stamp(
    cls: type[E],
    data: Any,
    envelope: Envelope,
    *,
    event_id: str,
    time: datetime,
    source: str,
    causation_id: str | None,
    turn_id: str | None = None,
) -> E:
    """The one place an event is given its envelope (every service and decider comes here).

    `data` was validated when it was made, and the envelope's values are the strings of
    an `Envelope`: an event of a known kind is put together without validating them again
    (the validating constructor cost twice as much, on every event a service appends). It
    is the model the constructor makes, field for field (tests/unit/test_stamp.py); any
    other `data` (a dict, say) goes through the constructor."""
    known = _DATA_TYPES.get(cls)
    if known is None:
        known = _DATA_TYPES[cls] = _data_type(cls)
    if type(data) is known and isinstance(time, datetime):
        event = object.__new__(cls)
        _set_attr(
            event,
            "__dict__",
            {
                "id": event_id,
                "type": cls.__name__,
                "time": time,
                "session_id": envelope.session_id,
                "chat_id": envelope.chat_id,
                "turn_id": turn_id or envelope.turn_id,
                "trace_id": envelope.trace_id,
                "correlation_id": envelope.correlation_id,
                "causation_id": causation_id,
                "source": source,
                "schema_version": SCHEMA_VERSION,
                "data": data,
            },
        )
        _set_attr(event, "__pydantic_fields_set__", set(_STAMPED))
        _set_attr(event, "__pydantic_extra__", None)
        _set_attr(event, "__pydantic_private__", None)
        return event
    return cls(  # type: ignore[call-arg]
        id=event_id,
        time=time,
        session_id=envelope.session_id,
        chat_id=envelope.chat_id,
        turn_id=turn_id or envelope.turn_id,
        trace_id=envelope.trace_id,
        correlation_id=envelope.correlation_id,
        causation_id=causation_id,
        source=source,
        data=data,
    )


M = TypeVar("M", bound=BaseModel)


def changed(model: M, **update: Any) -> M:
    """`model.model_copy(update=update)`, field for field (tests/unit/test_stamp.py), for
    a model with no extra fields or private attributes (every event and its data): without
    pydantic's general copy, which joining two stage events would pay for twice."""
    if model.__pydantic_extra__ is not None or model.__pydantic_private__ is not None:
        return model.model_copy(update=update)
    copy = _new(type(model))
    _set_attr(copy, "__dict__", model.__dict__ | update)
    _set_attr(copy, "__pydantic_fields_set__", {*model.__pydantic_fields_set__, *update})
    _set_attr(copy, "__pydantic_extra__", None)
    _set_attr(copy, "__pydantic_private__", None)
    return copy


_new = object.__new__
_set_attr = object.__setattr__
_FIELDS = (*EventBase.model_fields, "data")
_STAMPED = frozenset(_FIELDS) - {"type", "schema_version"}
"""The fields `stamp` gives the constructor (an event's `model_fields_set`)."""
_DATA_TYPES: dict[type[EventBase], type | bool] = {}
"""Per event kind, the type of the `data` `stamp` puts together itself (False: none)."""


def _data_type(cls: type[EventBase]) -> type | bool:
    """The type of `cls`'s `data` if `stamp` may build it without the validating
    constructor: the envelope's fields in order, a `type` named after the class, one
    `data` model, nothing computed on construction; else False."""
    fields = cls.model_fields
    field = fields.get("data")
    data: object = None if field is None else field.annotation
    fits = (
        cls.__pydantic_complete__
        and tuple(fields) == _FIELDS
        and fields["type"].default == cls.__name__
        and fields["schema_version"].default == SCHEMA_VERSION
        and isinstance(data, type)
        and issubclass(data, BaseModel)
        and not cls.__private_attributes__
        and not cls.__pydantic_post_init__
    )
    return data if fits and isinstance(data, type) else False
