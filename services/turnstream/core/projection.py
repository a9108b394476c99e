"""A session's turns as people read them: a fold over all its events (replay, audits).

Unlike `session.SessionState` (what the decider needs), this view keeps every turn with its
stage timeline, outcome and usage, including turns the gateway rejected.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from turnstream.core.costs import add_tokens, add_usage, count_usage, model_key
from turnstream.core.events import (
    Event,
    FailureClass,
    FollowUpQueued,
    InputAccepted,
    InputRejected,
    MessageDropped,
    MessageSent,
    ProviderRequestCompleted,
    ProviderRequestStarted,
    SessionTurnStart,
    Stage,
    StagePostFired,
    StagePreFired,
    SubTurnEnded,
    SubTurnResultDelivered,
    SubTurnSpawned,
    TurnEnded,
    TurnStatus,
)


@dataclass
class StageSpan:
    stage: Stage
    iteration: int
    started_at: datetime
    ended_at: datetime | None = None
    outcome: str | None = None

    @property
    def duration_ms(self) -> float | None:
        if self.ended_at is None:
            return None
        return (self.ended_at - self.started_at).total_seconds() * 1000


@dataclass
class ChildView:
    """A sub-turn as its parent turn sees it."""

    session_id: str
    agent: str | None
    mode: str
    spawned_at: datetime
    ended_at: datetime | None = None
    status: TurnStatus | None = None
    failure_class: FailureClass | None = None
    delivered_as: str | None = None

    @property
    def duration_ms(self) -> float | None:
        if self.ended_at is None:
            return None
        return (self.ended_at - self.spawned_at).total_seconds() * 1000


@dataclass
class TurnView:
    turn_id: str
    input_text: str = ""
    sender: str = ""
    attachments: list[str] = field(default_factory=list)
    """What its input carried: `name (media type, size)` each."""
    received_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    queued: bool = False
    status: TurnStatus | None = None
    failure_class: FailureClass | None = None
    reason: str | None = None
    next_action: str | None = None
    reply: str | None = None
    provider_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    models: dict[str, list[int]] = field(default_factory=dict)
    """Tokens per model (`SessionSummary.models`), for pricing."""
    stages: list[StageSpan] = field(default_factory=list)
    children: dict[str, ChildView] = field(default_factory=dict)
    """Sub-turns it spawned, by invocation id."""
    messages: list[str] = field(default_factory=list)
    """What it sent other sessions: `→ <to> (<cause>)`, `✗ <to> dropped (<reason>)`."""

    @property
    def duration_ms(self) -> float | None:
        start = self.received_at or self.started_at
        if start is None or self.ended_at is None:
            return None
        return (self.ended_at - start).total_seconds() * 1000


@dataclass
class SessionView:
    session_id: str
    turns: dict[str, TurnView] = field(default_factory=dict)
    events: int = 0
    terminal_events: int = 0

    def models(self) -> dict[str, list[int]]:
        """The tokens of all its turns per model (`TurnView.models` summed)."""
        total: dict[str, list[int]] = {}
        for turn in self.turns.values():
            for key, counts in turn.models.items():
                add_tokens(total, key, counts)
        return total

    def turn(self, turn_id: str) -> TurnView:
        view = self.turns.get(turn_id)
        if view is None:
            view = self.turns[turn_id] = TurnView(turn_id)
        return view


def build_view(session_id: str, events: Iterable[Event]) -> SessionView:
    """Fold a session's events into its readable view."""
    view = SessionView(session_id)
    spawned: dict[str, ChildView] = {}
    """Spawn keys → their child: a child's reply is its result, not a turn."""
    replies: dict[str, InputAccepted] = {}
    """Children's replies by the turn id they carry (the first of each)."""
    for event in events:
        view.events += 1
        if event.turn_id is None:
            continue
        if isinstance(event, InputAccepted) and event.data.in_reply_to in spawned:
            replies.setdefault(event.turn_id, event)
            continue
        first = replies.get(event.turn_id)
        if first is not None and event.turn_id not in view.turns:
            # an async child's result that became a follow-up turn: its input first
            _accepted(view.turn(event.turn_id), first)
        _fold(view, view.turn(event.turn_id), event, spawned)
    return view


def _fold(view: SessionView, turn: TurnView, event: Event, spawned: dict[str, ChildView]) -> None:
    """What one event of a turn adds to its view (and to the session's)."""
    match event:
        case InputAccepted():
            _accepted(turn, event)
        case SubTurnSpawned(data=data):
            child = ChildView(data.child_session_id, data.agent, data.mode, event.time)
            spawned[data.idempotency_key] = turn.children[data.invocation_id] = child
        case SubTurnEnded(data=data) if data.invocation_id in turn.children:
            child = turn.children[data.invocation_id]
            child.ended_at, child.status = event.time, data.status
            child.failure_class = data.failure_class
        case SubTurnResultDelivered(data=data) if data.invocation_id in turn.children:
            turn.children[data.invocation_id].delivered_as = data.delivered_as
        case MessageSent(data=data) if data.cause != "subturn":
            turn.messages.append(f"→ {data.to} ({data.cause}, {data.kind})")
        case MessageDropped(data=data):
            turn.messages.append(f"✗ {data.to} dropped ({data.reason}, hops {data.hops})")
        case InputRejected(data=data):
            turn.input_text, turn.received_at = data.excerpt, event.time
        case FollowUpQueued():
            turn.queued = True
        case SessionTurnStart():
            turn.started_at = event.time
        case StagePreFired(data=data):
            if (left := data.previous) is not None:  # it carries the stage it left
                _stage_ended(turn, left.stage, left.ended_at or event.time, left.outcome)
            turn.stages.append(StageSpan(data.stage, data.iteration, event.time))
        case StagePostFired(data=data):
            _stage_ended(turn, data.stage, event.time, data.outcome)
        case ProviderRequestStarted():
            turn.provider_calls += 1
        case ProviderRequestCompleted(data=data):
            count_usage(turn, data.usage)
            add_usage(turn.models, model_key(data.provider, data.model), data.usage)
        case TurnEnded(data=data):
            view.terminal_events += 1
            turn.ended_at, turn.status = event.time, data.status
            turn.failure_class, turn.reason = data.failure_class, data.reason
            turn.next_action, turn.reply = data.next_action, data.reply
        case _:
            pass


def _accepted(turn: TurnView, event: InputAccepted) -> None:
    data = event.data
    turn.input_text, turn.received_at = data.text, event.time
    turn.sender = f"{data.sender.kind}:{data.sender.id}"
    turn.attachments = [
        f"{a.name} ({a.media_type}, {a.size:,} bytes)" for a in data.attachments or []
    ]


def _stage_ended(turn: TurnView, stage: Stage, at: datetime, outcome: str) -> None:
    for span in reversed(turn.stages):
        if span.stage is stage and span.ended_at is None:
            span.ended_at, span.outcome = at, outcome
            return
