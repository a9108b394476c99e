"""Stamps the envelope of a turn's events and chains their causation ids."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from turnstream.core.events import (
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
)
from turnstream.core.turn.state import ActiveTurn, Context

E = TypeVar("E", bound=EventBase)


@dataclass(slots=True)
class Builder:
    session_id: str
    turn: ActiveTurn
    ctx: Context
    last_id: str = field(init=False)

    def __post_init__(self) -> None:
        self.last_id = self.turn.last_event_id

    def make(
        self,
        cls: type[E],
        data: Any,
        at: datetime | None = None,
        *,
        turn_id: str | None = None,
    ) -> E:
        event = cls(  # type: ignore[call-arg]
            id=self.ctx.new_id(),
            time=at or self.ctx.now,
            session_id=self.session_id,
            chat_id=self.turn.chat_id,
            turn_id=turn_id or self.turn.turn_id,
            trace_id=self.turn.trace_id,
            correlation_id=self.turn.correlation_id,
            causation_id=self.last_id,
            source=self.ctx.source,
            data=data,
        )
        self.last_id = event.id
        return event

    def pre(self, stage: Stage, at: datetime | None = None, *, iteration: int = 0) -> Event:
        it = iteration or self.turn.iteration
        return self.make(StagePreFired, StagePreFiredData(stage=stage, iteration=it), at)

    def post(self, stage: Stage, outcome: StageOutcome, at: datetime | None = None) -> Event:
        data = StagePostFiredData(stage=stage, iteration=self.turn.iteration, outcome=outcome)
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
