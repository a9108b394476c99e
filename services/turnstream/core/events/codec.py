"""The `Event` union and its one decoder: wire bytes ↔ events (`encode`, `decode`), old
schema versions upgraded by `upcast` first. Re-exported by `turnstream.core.events`."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from pydantic import ConfigDict, Field, TypeAdapter

from turnstream.core.events.agents import (
    MessageDropped,
    MessageSent,
    SessionConfigured,
    SubTurnEnded,
    SubTurnResultDelivered,
    SubTurnSpawned,
)
from turnstream.core.events.audit import AuditViolation
from turnstream.core.events.base import SCHEMA_VERSION, EventBase
from turnstream.core.events.extensions import ContextProvided, ContextSkipped, ProviderFallback
from turnstream.core.events.input import (
    FollowUpQueued,
    InputAccepted,
    InputRejected,
    InterruptReceived,
    SteeringInjected,
)
from turnstream.core.events.lifecycle import (
    RenderEmitted,
    SessionTurnEnd,
    SessionTurnStart,
    StagePostFired,
    StagePreFired,
    TurnEnded,
)
from turnstream.core.events.provider import (
    ContextCompacted,
    ProviderRequestCompleted,
    ProviderRequestFailed,
    ProviderRequestStarted,
    ProviderRetry,
)
from turnstream.core.events.push import PushNotificationAbandoned
from turnstream.core.events.tools import (
    HookDecided,
    InteractionAnswered,
    InteractionRequested,
    ToolCallApproved,
    ToolCallDenied,
    ToolCallModeInvoked,
    ToolInvocationCancelled,
    ToolInvocationFailed,
    ToolInvocationProposed,
    ToolInvocationRequested,
    ToolInvocationStarted,
    ToolInvocationSucceeded,
)
from turnstream.core.events.workflow import (
    StageAssertOutcome,
    StageCancelled,
    StageCheckGateResult,
    StageCompletionChecked,
    StageEntered,
    StageExited,
    StageGranted,
    StageInitFailed,
    WorkflowAttached,
    WorkflowExit,
)

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
    | ContextCompacted
    | ToolInvocationProposed
    | ToolCallModeInvoked
    | ToolCallApproved
    | ToolCallDenied
    | InteractionRequested
    | InteractionAnswered
    | ToolInvocationRequested
    | ToolInvocationStarted
    | ToolInvocationSucceeded
    | ToolInvocationFailed
    | ToolInvocationCancelled
    | HookDecided
    | AuditViolation
    | PushNotificationAbandoned
    | WorkflowAttached
    | StageEntered
    | StageInitFailed
    | StageCheckGateResult
    | StageCompletionChecked
    | StageAssertOutcome
    | StageGranted
    | StageCancelled
    | StageExited
    | WorkflowExit
    | SessionConfigured
    | MessageSent
    | MessageDropped
    | SubTurnSpawned
    | SubTurnEnded
    | SubTurnResultDelivered
    | ProviderFallback
    | ContextProvided
    | ContextSkipped,
    Field(discriminator="type"),
]

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event, config=ConfigDict(cache_strings="keys"))
"""Caches the JSON keys it reads, not the values: an event's values are mostly unique ids,
and pydantic-core's string cache (16,384 strings for the whole process) kept each one
made in a burst alive, scattered over the allocator's arenas it had grown to, so none
could be given back (docs/performance.md, "A burst of new sessions")."""

EVENT_TYPES: dict[str, type[EventBase]] = {
    cls.model_fields["type"].default: cls
    for cls in EventBase.__subclasses__()
    if "type" in cls.model_fields
}


def upcast(raw: dict[str, Any]) -> dict[str, Any]:
    """Upgrade an event dict written by an older schema version to the current one.

    Version 2 added `StagePreFired.previous` (optional): a version 1 event is read as it is.
    """
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


_AS_IS = (b'"schemaVersion":2,', b'"schemaVersion":1,')
"""The versions `upcast` leaves as they are (every one so far), as `encode` writes them (the
version is not the last key): a new version that upcasts older ones changes this."""


def decode(data: bytes) -> Event:
    """Wire bytes → event: validated at once in a version `upcast` leaves as it is
    (`_AS_IS`); upcast first otherwise."""
    if _AS_IS[0] in data or _AS_IS[1] in data:
        return EVENT_ADAPTER.validate_json(data)  # what upcast leaves as it is
    return EVENT_ADAPTER.validate_python(upcast(orjson.loads(data)))
