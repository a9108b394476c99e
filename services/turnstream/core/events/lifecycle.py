"""Turn events: the turn bracket, its stages, its rendered reply and its one terminal event."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from turnstream.core.events.base import (
    EventBase,
    FailureClass,
    Sender,
    Stage,
    StageOutcome,
    TurnStatus,
    WireModel,
)


class SessionTurnStartData(WireModel):
    input_id: str
    text: str
    sender: Sender


class SessionTurnStart(EventBase):
    type: Literal["SessionTurnStart"] = "SessionTurnStart"
    data: SessionTurnStartData


class PreviousStage(WireModel):
    """The stage that ended just before this one began, as its `StagePostFired` would have
    said: a decision that leaves one stage and enters the next stores one event."""

    stage: Stage
    iteration: int
    outcome: StageOutcome
    ended_at: datetime | None = None
    """When it ended, if not at this event's `time`."""


class StagePreFiredData(WireModel):
    stage: Stage
    iteration: int
    """Continuation round of the turn, from 1."""
    previous: PreviousStage | None = None
    """Set (schema version 2 on) when this event also stands for the `StagePostFired` of
    the stage just left: read it as that event followed by this one."""


class StagePreFired(EventBase):
    type: Literal["StagePreFired"] = "StagePreFired"
    data: StagePreFiredData


class StagePostFiredData(WireModel):
    stage: Stage
    iteration: int
    outcome: StageOutcome


class StagePostFired(EventBase):
    type: Literal["StagePostFired"] = "StagePostFired"
    data: StagePostFiredData


class RenderEmittedData(WireModel):
    text: str
    reply_to: str | None = None


class RenderEmitted(EventBase):
    type: Literal["RenderEmitted"] = "RenderEmitted"
    data: RenderEmittedData


class TurnEndedData(WireModel):
    status: TurnStatus
    failure_class: FailureClass | None = None
    reason: str | None = None
    next_action: str | None = None
    """What the sender or operator can do next (always set when not completed)."""
    reply: str | None = None
    iterations: int = 0


class TurnEnded(EventBase):
    type: Literal["TurnEnded"] = "TurnEnded"
    data: TurnEndedData


class SessionTurnEndData(WireModel):
    status: TurnStatus


class SessionTurnEnd(EventBase):
    type: Literal["SessionTurnEnd"] = "SessionTurnEnd"
    data: SessionTurnEndData
