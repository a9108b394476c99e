"""Stamps the envelope of a turn's events and chains their causation ids.

A stage left and the next one entered at once are one event: `leave` closes a stage without
making its `StagePostFired`, and the `StagePreFired` made right after carries it
(`previous`, `turnstream.core.events.stages`). Anything else made first goes after the
close's own `StagePostFired`, which `closed` puts in front.

    b.leave(Stage.COMPOSE_REQUEST), then
    b.closed([b.pre(Stage.SEND_REQUEST)])    [StagePreFired(SEND_REQUEST, previous=COMPOSE ok)]
    b.closed(b.fail(...))                    [StagePostFired(COMPOSE ok), TurnEnded]
    b.closed([])                             [StagePostFired(COMPOSE ok)]   (a hook waits)
"""

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
    PreviousStage,
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
    stage: Stage = field(init=False)
    stage_open: bool = field(init=False)
    """The turn's stage, and whether it is open, as of the events made so far."""
    left: _Left | None = field(init=False, default=None)
    """The stage `leave` closed, its `StagePostFired` not made yet."""

    def __post_init__(self) -> None:
        self.last_id = self.turn.last_event_id
        turn = self.turn
        self.stage, self.stage_open = turn.stage, turn.stage_open
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
        event_id: str | None = None,
    ) -> E:
        event = stamp(
            cls,
            data,
            self.envelope,
            event_id=event_id or self.ctx.new_id(),
            time=at or self.ctx.now,
            source=self.ctx.source,
            causation_id=self.last_id,
            turn_id=turn_id,
        )
        self.last_id = event.id
        return event

    def pre(self, stage: Stage, at: datetime | None = None, *, iteration: int = 0) -> Event:
        data = _pre_data(stage, iteration or self.turn.iteration)
        left = self.left
        if left is not None and self.last_id == left.event_id:  # nothing made since: carry it
            self.left = None
            at = at or self.ctx.now
            data = _pre_after(data, left.data, None if left.at == at else left.at)
            self.last_id = left.cause
            event = self.make(StagePreFired, data, at, event_id=left.event_id)
        else:
            event = self.make(StagePreFired, data, at)
        self.stage, self.stage_open = stage, True
        return event

    def post(self, stage: Stage, outcome: StageOutcome, at: datetime | None = None) -> Event:
        data = _post_data(stage, self.turn.iteration, outcome)
        self.stage, self.stage_open = stage, False
        return self.make(StagePostFired, data, at)

    def leave(self, stage: Stage, outcome: StageOutcome = "ok", at: datetime | None = None) -> None:
        """Close `stage` now; its `StagePostFired` is the next `pre`'s `previous`, or made
        by `closed`. The events made after are caused by it."""
        data = _post_data(stage, self.turn.iteration, outcome)
        event_id = self.ctx.new_id()
        self.left = _Left(data, at or self.ctx.now, event_id, self.last_id)
        self.last_id = event_id
        self.stage, self.stage_open = stage, False

    def closed(self, then: list[Event]) -> list[Event]:
        """`then`, made after `leave`: as it is if its first event carried the close,
        else with the close's own `StagePostFired` first."""
        left = self.left
        if left is None:
            return then
        self.left = None
        post = stamp(
            StagePostFired,
            left.data,
            self.envelope,
            event_id=left.event_id,
            time=left.at,
            source=self.ctx.source,
            causation_id=left.cause,
        )
        return [post, *then]

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
        if self.stage_open:
            events.append(self.post(self.stage, "failed"))
        events.append(self.end("failed", failure, reason=reason, next_action=next_action))
        return events


@dataclass(frozen=True, slots=True)
class _Left:
    """A stage `leave` closed: its `StagePostFired`'s data, time, id and cause."""

    data: StagePostFiredData
    at: datetime
    event_id: str
    cause: str


# a turn's stage events repeat the same few data, frozen: each is validated once, not once
# per event (about half of a turn's events are stage events)
@lru_cache(maxsize=1024)
def _pre_data(stage: Stage, iteration: int) -> StagePreFiredData:
    return StagePreFiredData(stage=stage, iteration=iteration)


@lru_cache(maxsize=1024)
def _post_data(stage: Stage, iteration: int, outcome: StageOutcome) -> StagePostFiredData:
    return StagePostFiredData(stage=stage, iteration=iteration, outcome=outcome)


@lru_cache(maxsize=1024)
def _pre_after_at_once(data: StagePreFiredData, left: StagePostFiredData) -> StagePreFiredData:
    previous = PreviousStage(stage=left.stage, iteration=left.iteration, outcome=left.outcome)
    return StagePreFiredData(stage=data.stage, iteration=data.iteration, previous=previous)


def _pre_after(
    data: StagePreFiredData, left: StagePostFiredData, ended_at: datetime | None
) -> StagePreFiredData:
    """`data` carrying the stage left (`ended_at`: when, if not at this event's time)."""
    if ended_at is None:
        return _pre_after_at_once(data, left)
    previous = PreviousStage(
        stage=left.stage, iteration=left.iteration, outcome=left.outcome, ended_at=ended_at
    )
    return StagePreFiredData(stage=data.stage, iteration=data.iteration, previous=previous)
