"""A session at a glance, as the audit service keeps it in the `ts_sessions` KV bucket.

A fold over the session's events (`evolve_summary`), like `projection.build_view` but small
and cheap: counts, the open turn, the last outcome and reply, token usage and the log
sequence it is current to. Other services and UIs watch the bucket; `to_json` / `from_json`
are the wire form (camelCase JSON, one value per session, under `session_key`).

```
idle ──SessionTurnStart──► active ──TurnEnded──► completed | failed | denied
                              ▲                          │
                              └─────SessionTurnStart─────┘
```
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import orjson
from pydantic.alias_generators import to_camel

from turnstream.core.costs import add_usage, count_usage, model_key
from turnstream.core.events import (
    AuditViolation,
    Event,
    InputAccepted,
    InputRejected,
    MessageDropped,
    MessageSent,
    ProviderRequestCompleted,
    RenderEmitted,
    SecurityMode,
    SessionConfigured,
    SessionTurnStart,
    SubTurnEnded,
    SubTurnSpawned,
    ToolInvocationRequested,
    TurnEnded,
    WorkflowAttached,
)
from turnstream.core.justification import stage_tools

SummaryStatus = Literal["idle", "active", "completed", "failed", "denied"]
REPLY_CHARS = 1000
"""`lastReply` keeps this much of the reply: a KV value must fit in one message."""


@dataclass(slots=True)
class SessionSummary:
    """Mutable: a rebuild folds every event of the log into these without copying them."""

    session_id: str
    status: SummaryStatus = "idle"
    turns: int = 0
    """Turns started by the runner or rejected by the gateway."""
    completed: int = 0
    failed: int = 0
    denied: int = 0
    open_turn: str | None = None
    open_since: datetime | None = None
    last_turn: str | None = None
    last_failure_class: str | None = None
    last_reply: str | None = None
    input_tokens: int = 0
    """Input tokens read at the full price; with the two cache counts, all the input read."""
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    models: dict[str, list[int]] | None = None
    """Tokens per model, `{<provider>/<model>: [input, output, cache write, cache read]}`:
    what a price table turns into money (`core/costs.py`)."""
    tool_calls: int = 0
    violations: int = 0
    events: int = 0
    last_seq: int = 0
    """The log sequence of the last event folded in: the summary is current up to it."""
    updated_at: datetime | None = None
    agent: str | None = None
    """The session's agent (`SessionConfigured`)."""
    children: dict[str, str] | None = None
    """Sub-turns by child session id: `running`, or how they ended."""
    pending_replies: list[str] | None = None
    """Turns whose input wants a reply (`replyTo`) not sent yet."""
    security_mode: SecurityMode | None = None
    """The security mode its agent's profile gives it (`SessionConfigured`); None: the
    deployment's default. With `stage_tools`, what the audit judges a forgotten session's
    approvals by when it comes back."""
    stage_tools: list[str] | None = None
    """The tools the stages of the workflows attached to it allow (`WorkflowAttached`)."""

    def to_json(self) -> bytes:
        return orjson.dumps({_CAMEL[name]: getattr(self, name) for name in _FIELDS})

    @classmethod
    def from_json(cls, data: bytes) -> SessionSummary:
        raw: dict[str, Any] = orjson.loads(data)
        values = {name: raw[camel] for name, camel in _CAMEL.items() if camel in raw}
        for name in ("open_since", "updated_at"):
            if values.get(name) is not None:
                values[name] = datetime.fromisoformat(values[name])
        return cls(**values)


def count_event(summary: SessionSummary, seq: int, time: datetime) -> SessionSummary:
    """What every event does to its session's summary, whatever its kind (all that one of a
    kind outside `SUMMARY_KINDS` does): in place; returns it."""
    summary.events += 1
    summary.last_seq = seq
    summary.updated_at = time
    return summary


def evolve_summary(summary: SessionSummary, seq: int, event: Event) -> SessionSummary:
    """Fold one event (at log sequence `seq`) into `summary`, in place; returns it."""
    count_event(summary, seq, event.time)
    match event:
        case SessionTurnStart():
            summary.turns += 1
            summary.status = "active"
            summary.open_turn, summary.open_since = event.turn_id, event.time
        case InputRejected():
            summary.turns += 1
        case ProviderRequestCompleted(data=data):
            count_usage(summary, data.usage)
            key = model_key(data.provider, data.model)
            summary.models = add_usage(summary.models or {}, key, data.usage)
        case ToolInvocationRequested():
            summary.tool_calls += 1
        case RenderEmitted(data=data):
            summary.last_reply = data.text[:REPLY_CHARS]
        case TurnEnded(data=data):
            setattr(summary, data.status, getattr(summary, data.status) + 1)
            summary.last_turn = event.turn_id
            summary.last_failure_class = data.failure_class
            if data.reply is not None:
                summary.last_reply = data.reply[:REPLY_CHARS]
            if summary.open_turn == event.turn_id:
                summary.open_turn, summary.open_since = None, None
            if summary.open_turn is None:
                summary.status = data.status
        case AuditViolation():
            summary.violations += 1
        case SessionConfigured(data=data):
            summary.agent = summary.agent or data.agent
            summary.security_mode = summary.security_mode or data.security_mode
        case WorkflowAttached(data=data):
            tools = stage_tools(data.definition).union(summary.stage_tools or ())
            summary.stage_tools = sorted(tools) or None
        case InputAccepted(data=data) if data.reply_to and event.turn_id:
            summary.pending_replies = [*(summary.pending_replies or []), event.turn_id]
        case MessageSent(data=data) | MessageDropped(data=data) if data.cause == "replyTo":
            left = [t for t in summary.pending_replies or [] if t != event.turn_id]
            summary.pending_replies = left or None
        case SubTurnSpawned(data=data):
            summary.children = {**(summary.children or {}), data.child_session_id: "running"}
        case SubTurnEnded(data=data):
            summary.children = {**(summary.children or {}), data.child_session_id: data.status}
        case _:
            pass
    return summary


SUMMARY_KINDS = (
    SessionTurnStart,
    InputRejected,
    ProviderRequestCompleted,
    ToolInvocationRequested,
    RenderEmitted,
    TurnEnded,
    AuditViolation,
    SessionConfigured,
    InputAccepted,
    MessageSent,
    MessageDropped,
    SubTurnSpawned,
    SubTurnEnded,
    WorkflowAttached,
)
"""The kinds `evolve_summary` reads beyond `count_event` (a reader that skips decoding the
others, as the audit does, folds them with `count_event`): one for each case above."""
_FIELDS = SessionSummary.__dataclass_fields__
_CAMEL = {name: to_camel(name) for name in _FIELDS}
