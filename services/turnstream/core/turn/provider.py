"""The provider port of a turn: the request the shell hands a model, and what comes back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from turnstream.core.events import Attachment, StopReason, Usage
from turnstream.core.turn.state import Message, ToolCall, ToolInfo


@dataclass(frozen=True)
class ProviderRequest:
    """What the shell hands to a provider."""

    session_id: str
    turn_id: str
    iteration: int
    call_index: int
    system: str | None
    messages: tuple[Message, ...]
    tools: tuple[ToolInfo, ...] = ()
    stage: str | None = None
    """The workflow stage this request is for (scripts may reply per stage)."""
    trace_id: str = ""
    """The turn's `traceId` (the envelope's), so the call is traced in the turn's trace."""
    agent: str | None = None
    """The session's agent (scripts may reply per agent)."""
    on_fallback: bool = False
    """The turn switched to the fallback model earlier (`ProviderFallback`): stay there."""
    model: str | None = None
    """The model an LLM interceptor asked for instead of the provider's own (None: its own)."""
    system_split: int | None = None
    """Where in `system` the prompt's own text ends and the turn's stable context blocks
    begin: a provider's prompt cache keeps the first part when only the context changes
    (a compaction's new summary). None: one part."""
    attachments: tuple[Attachment, ...] = ()
    """The attachments its messages carry (the shell puts their bytes in `files`)."""
    files: Mapping[str, bytes] = field(default_factory=dict)
    """The bytes of the history's attachments by SHA-256, put in by the shell from the
    object store just before the call (the core composes requests without them)."""
    volatile: str | None = None
    """Context that changes from turn to turn (the time): a provider puts it at the end of
    the request, after what its prompt cache can keep (`system`, `tools`, the history)."""


@dataclass(frozen=True)
class Retry:
    """One failed attempt that the provider retried after `delay_ms`."""

    attempt: int
    delay_ms: int
    error_class: str
    message: str
    at: datetime


@dataclass(frozen=True)
class Fallback:
    """The primary model failed for good (after `retries`) and the call went to the fallback."""

    from_model: str
    """`provider/model` of the primary."""
    to_model: str
    """`provider/model` of the fallback."""
    failure: ProviderFailure
    """The primary's last failed attempt (its `retries` are the attempts before it)."""


@dataclass(frozen=True)
class ProviderSuccess:
    text: str
    stop_reason: StopReason
    usage: Usage
    first_byte_at: datetime
    finished_at: datetime
    tool_calls: tuple[ToolCall, ...] = ()
    retries: tuple[Retry, ...] = ()
    fallback: Fallback | None = None
    """Set when this outcome is the fallback model's (its retries are in `retries`)."""


@dataclass(frozen=True)
class ProviderFailure:
    error_class: str
    """`rate_limit`, `overloaded`, `server_error`, `connection`, `timeout`,
    `prompt_too_long`, `bad_request`, `auth`, `internal`."""
    message: str
    retryable: bool
    failed_at: datetime
    status_code: int | None = None
    retry_after_s: float | None = None
    """The server's `retry-after`, when it sent one."""
    retries: tuple[Retry, ...] = ()
    fallback: Fallback | None = None
    """Set when this outcome is the fallback model's (its retries are in `retries`)."""


ProviderOutcome = ProviderSuccess | ProviderFailure
