"""A session's turns as people read them: a fold over all its events (replay, audits).

Unlike `turn.SessionState` (what the decider needs), this view keeps every turn with its
stage timeline, outcome and usage, including turns the gateway rejected.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from turnstream.core.events import (
    Event,
    FailureClass,
    FollowUpQueued,
    InputAccepted,
    InputRejected,
    ProviderRequestCompleted,
    ProviderRequestStarted,
    SessionTurnStart,
    Stage,
    StagePostFired,
    StagePreFired,
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
class TurnView:
    turn_id: str
    input_text: str = ""
    sender: str = ""
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
    stages: list[StageSpan] = field(default_factory=list)

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

    def turn(self, turn_id: str) -> TurnView:
        view = self.turns.get(turn_id)
        if view is None:
            view = self.turns[turn_id] = TurnView(turn_id)
        return view


def build_view(session_id: str, events: Iterable[Event]) -> SessionView:
    """Fold a session's events into its readable view."""
    view = SessionView(session_id)
    for event in events:
        view.events += 1
        if event.turn_id is None:
            continue
        turn = view.turn(event.turn_id)
        match event:
            case InputAccepted(data=data):
                turn.input_text, turn.received_at = data.text, event.time
                turn.sender = f"{data.sender.kind}:{data.sender.id}"
            case InputRejected(data=data):
                turn.input_text, turn.received_at = data.excerpt, event.time
            case FollowUpQueued():
                turn.queued = True
            case SessionTurnStart():
                turn.started_at = event.time
            case StagePreFired(data=data):
                turn.stages.append(StageSpan(data.stage, data.iteration, event.time))
            case StagePostFired(data=data):
                for span in reversed(turn.stages):
                    if span.stage is data.stage and span.ended_at is None:
                        span.ended_at, span.outcome = event.time, data.outcome
                        break
            case ProviderRequestStarted():
                turn.provider_calls += 1
            case ProviderRequestCompleted(data=data):
                turn.input_tokens += data.usage.input_tokens
                turn.output_tokens += data.usage.output_tokens
            case TurnEnded(data=data):
                view.terminal_events += 1
                turn.ended_at, turn.status = event.time, data.status
                turn.failure_class, turn.reason = data.failure_class, data.reason
                turn.next_action, turn.reply = data.next_action, data.reply
            case _:
                pass
    return view
