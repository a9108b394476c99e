"""The log's event kinds: frozen pydantic models with one envelope (DESIGN §2).

Every event is a past-tense fact. On the wire field names are camelCase; `type` is the
discriminator of the `Event` union and `EVENT_ADAPTER` is the one decoder. Old schema
versions are upgraded by `upcast` (pure) before validation, so a log written today
replays tomorrow.
"""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from pydantic import ConfigDict, Field, TypeAdapter

from turnstream.core.events.agents import (
    AgentBudget,
    Delivery,
    MessageCause,
    MessageDropped,
    MessageDroppedData,
    MessageSent,
    MessageSentData,
    ParentRef,
    ReplyOutcome,
    SessionConfigured,
    SessionConfiguredData,
    SpawnMode,
    SubTurnEnded,
    SubTurnEndedData,
    SubTurnResultDelivered,
    SubTurnResultDeliveredData,
    SubTurnSpawned,
    SubTurnSpawnedData,
)
from turnstream.core.events.audit import AuditViolation, AuditViolationData, ViolationKind
from turnstream.core.events.base import (
    SCHEMA_VERSION,
    Envelope,
    EventBase,
    FailureClass,
    Sender,
    Stage,
    StageOutcome,
    TurnStatus,
    WireModel,
    stamp,
)
from turnstream.core.events.extensions import (
    ContextProvided,
    ContextProvidedData,
    ContextSkipped,
    ContextSkippedData,
    ProviderFallback,
    ProviderFallbackData,
)
from turnstream.core.events.input import (
    ATTACHMENT_PREFIX,
    Attachment,
    FollowUpQueued,
    FollowUpQueuedData,
    InputAccepted,
    InputAcceptedData,
    InputRejected,
    InputRejectedData,
    InterruptReceived,
    InterruptReceivedData,
    RejectionKind,
    SteeringInjected,
    SteeringInjectedData,
)
from turnstream.core.events.lifecycle import (
    PreviousStage,
    RenderEmitted,
    RenderEmittedData,
    SessionTurnEnd,
    SessionTurnEndData,
    SessionTurnStart,
    SessionTurnStartData,
    StagePostFired,
    StagePostFiredData,
    StagePreFired,
    StagePreFiredData,
    TurnEnded,
    TurnEndedData,
)
from turnstream.core.events.provider import (
    AssistantMessage,
    ContentBlock,
    ContextCompacted,
    ContextCompactedData,
    ProviderRequestCompleted,
    ProviderRequestCompletedData,
    ProviderRequestFailed,
    ProviderRequestFailedData,
    ProviderRequestStarted,
    ProviderRequestStartedData,
    ProviderRetry,
    ProviderRetryData,
    StopReason,
    TextBlock,
    ToolUseBlock,
    Usage,
)
from turnstream.core.events.push import PushNotificationAbandoned, PushNotificationAbandonedData
from turnstream.core.events.stages import merged_stages, stage_left, unmerged
from turnstream.core.events.tools import (
    Authority,
    CompactionChange,
    HistoryMessage,
    HookAction,
    HookDecided,
    HookDecidedData,
    InteractionAnswered,
    InteractionAnsweredData,
    InteractionRequested,
    InteractionRequestedData,
    RequestChange,
    ResponseChange,
    SecurityMode,
    StageEnvelope,
    ToolCallApproved,
    ToolCallApprovedData,
    ToolCallDenied,
    ToolCallDeniedData,
    ToolCallModeInvoked,
    ToolCallModeInvokedData,
    ToolError,
    ToolInvocationCancelled,
    ToolInvocationCancelledData,
    ToolInvocationFailed,
    ToolInvocationFailedData,
    ToolInvocationProposed,
    ToolInvocationProposedData,
    ToolInvocationRequested,
    ToolInvocationRequestedData,
    ToolInvocationStarted,
    ToolInvocationStartedData,
    ToolInvocationSucceeded,
    ToolInvocationSucceededData,
)
from turnstream.core.events.workflow import (
    CompletionOutcome,
    StageAssertOutcome,
    StageAssertOutcomeData,
    StageCancelled,
    StageCancelledData,
    StageCheckGateResult,
    StageCheckGateResultData,
    StageCompletionChecked,
    StageCompletionCheckedData,
    StageEntered,
    StageEnteredData,
    StageExited,
    StageExitedData,
    StageGranted,
    StageGrantedData,
    StageInitFailed,
    StageInitFailedData,
    StageResult,
    Verdict,
    WorkflowAttached,
    WorkflowAttachedData,
    WorkflowExit,
    WorkflowExitData,
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


__all__ = [
    "ATTACHMENT_PREFIX",
    "EVENT_ADAPTER",
    "EVENT_TYPES",
    "SCHEMA_VERSION",
    "AgentBudget",
    "AssistantMessage",
    "Attachment",
    "AuditViolation",
    "AuditViolationData",
    "Authority",
    "CompactionChange",
    "CompletionOutcome",
    "ContentBlock",
    "ContextCompacted",
    "ContextCompactedData",
    "ContextProvided",
    "ContextProvidedData",
    "ContextSkipped",
    "ContextSkippedData",
    "Delivery",
    "Envelope",
    "Event",
    "EventBase",
    "FailureClass",
    "FollowUpQueued",
    "FollowUpQueuedData",
    "HistoryMessage",
    "HookAction",
    "HookDecided",
    "HookDecidedData",
    "InputAccepted",
    "InputAcceptedData",
    "InputRejected",
    "InputRejectedData",
    "InteractionAnswered",
    "InteractionAnsweredData",
    "InteractionRequested",
    "InteractionRequestedData",
    "InterruptReceived",
    "InterruptReceivedData",
    "MessageCause",
    "MessageDropped",
    "MessageDroppedData",
    "MessageSent",
    "MessageSentData",
    "ParentRef",
    "PreviousStage",
    "ProviderFallback",
    "ProviderFallbackData",
    "ProviderRequestCompleted",
    "ProviderRequestCompletedData",
    "ProviderRequestFailed",
    "ProviderRequestFailedData",
    "ProviderRequestStarted",
    "ProviderRequestStartedData",
    "ProviderRetry",
    "ProviderRetryData",
    "PushNotificationAbandoned",
    "PushNotificationAbandonedData",
    "RejectionKind",
    "RenderEmitted",
    "RenderEmittedData",
    "ReplyOutcome",
    "RequestChange",
    "ResponseChange",
    "SecurityMode",
    "Sender",
    "SessionConfigured",
    "SessionConfiguredData",
    "SessionTurnEnd",
    "SessionTurnEndData",
    "SessionTurnStart",
    "SessionTurnStartData",
    "SpawnMode",
    "Stage",
    "StageAssertOutcome",
    "StageAssertOutcomeData",
    "StageCancelled",
    "StageCancelledData",
    "StageCheckGateResult",
    "StageCheckGateResultData",
    "StageCompletionChecked",
    "StageCompletionCheckedData",
    "StageEntered",
    "StageEnteredData",
    "StageEnvelope",
    "StageExited",
    "StageExitedData",
    "StageGranted",
    "StageGrantedData",
    "StageInitFailed",
    "StageInitFailedData",
    "StageOutcome",
    "StagePostFired",
    "StagePostFiredData",
    "StagePreFired",
    "StagePreFiredData",
    "StageResult",
    "SteeringInjected",
    "SteeringInjectedData",
    "StopReason",
    "SubTurnEnded",
    "SubTurnEndedData",
    "SubTurnResultDelivered",
    "SubTurnResultDeliveredData",
    "SubTurnSpawned",
    "SubTurnSpawnedData",
    "TextBlock",
    "ToolCallApproved",
    "ToolCallApprovedData",
    "ToolCallDenied",
    "ToolCallDeniedData",
    "ToolCallModeInvoked",
    "ToolCallModeInvokedData",
    "ToolError",
    "ToolInvocationCancelled",
    "ToolInvocationCancelledData",
    "ToolInvocationFailed",
    "ToolInvocationFailedData",
    "ToolInvocationProposed",
    "ToolInvocationProposedData",
    "ToolInvocationRequested",
    "ToolInvocationRequestedData",
    "ToolInvocationStarted",
    "ToolInvocationStartedData",
    "ToolInvocationSucceeded",
    "ToolInvocationSucceededData",
    "ToolUseBlock",
    "TurnEnded",
    "TurnEndedData",
    "TurnStatus",
    "Usage",
    "Verdict",
    "ViolationKind",
    "WireModel",
    "WorkflowAttached",
    "WorkflowAttachedData",
    "WorkflowExit",
    "WorkflowExitData",
    "decode",
    "encode",
    "merged_stages",
    "stage_left",
    "stamp",
    "unmerged",
    "upcast",
]
