"""Stamps the envelope of a turn's events and chains their causation ids."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any, TypeVar

from turnstream.core.events import (
    Envelope,
    Event,
    EventBase,
    FailureClass,
    Stage,
    StageOutcome,
    StagePostFired,
    StagePostFiredData,
    StagePreFired,
    StagePreFiredData,
    TurnEnded,
    TurnEndedData,
    TurnStatus,
    stamp,
)
from turnstream.core.turn.state import ActiveTurn, Context

E = TypeVar("E", bound=EventBase)


@dataclass(slots=True)
class Builder:
    session_id: str
    turn: ActiveTurn
    ctx: Context
    last_id: str = field(init=False)
    envelope: Envelope = field(init=False)

    def __post_init__(self) -> None:
        self.last_id = self.turn.last_event_id
        turn = self.turn
        self.envelope = Envelope(
            self.session_id, turn.chat_id, turn.turn_id, turn.trace_id, turn.correlation_id
        )

    def make(
        self,
        cls: type[E],
        data: Any,
        at: datetime | None = None,
        *,
        turn_id: str | None = None,
    ) -> E:
        event = stamp(
            cls,
            data,
            self.envelope,
            event_id=self.ctx.new_id(),
            time=at or self.ctx.now,
            source=self.ctx.source,
            causation_id=self.last_id,
            turn_id=turn_id,
        )
        self.last_id = event.id
        return event

    def pre(self, stage: Stage, at: datetime | None = None, *, iteration: int = 0) -> Event:
        data = _pre_data(stage, iteration or self.turn.iteration)
        return self.make(StagePreFired, data, at)

    def post(self, stage: Stage, outcome: StageOutcome, at: datetime | None = None) -> Event:
        data = _post_data(stage, self.turn.iteration, outcome)
        return self.make(StagePostFired, data, at)

    def end(
        self,
        status: TurnStatus,
        failure: FailureClass | None = None,
        *,
        reason: str | None = None,
        next_action: str | None = None,
        reply: str | None = None,
    ) -> Event:
        data = TurnEndedData(
            status=status,
            failure_class=failure,
            reason=reason,
            next_action=next_action,
            reply=reply,
            iterations=self.turn.iteration,
        )
        return self.make(TurnEnded, data)

    def fail(self, failure: FailureClass, reason: str, next_action: str) -> list[Event]:
        """End the turn failed, closing the stage it was in."""
        events: list[Event] = []
        if self.turn.stage_open:
            events.append(self.post(self.turn.stage, "failed"))
        events.append(self.end("failed", failure, reason=reason, next_action=next_action))
        return events


# a turn's stage events repeat the same few data, frozen: each is validated once, not once
# per event (about half of a turn's events are stage events)
@lru_cache(maxsize=1024)
def _pre_data(stage: Stage, iteration: int) -> StagePreFiredData:
    return StagePreFiredData(stage=stage, iteration=iteration)


@lru_cache(maxsize=1024)
def _post_data(stage: Stage, iteration: int, outcome: StageOutcome) -> StagePostFiredData:
    return StagePostFiredData(stage=stage, iteration=iteration, outcome=outcome)
