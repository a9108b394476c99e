"""One event for a stage transition: a `StagePostFired` followed at once, in the same
decision, by the `StagePreFired` of the same turn is stored as that `StagePreFired` with
`previous` set (schema version 2), so a one-tool turn stores 8 events fewer.

    decided                               stored
    Post(A, ok) ─▶ Pre(B)                 Pre(B, previous=A ok)
    Post(A, ok) ─▶ HookDecided …          Post(A, ok) ─▶ HookDecided …   (not followed by a Pre)
    … Post(A, ok)   (the decision ends)   … Post(A, ok)

The deciders make the merged event themselves: a step that closes a stage goes on at once
(`turnstream.core.turn.builder.Builder.leave`, `turnstream.core.turn.onward`), and where an
answer's events end with a close and the decider's start with the next stage, `joined`
makes the two one. `stage_left` and `unmerged` give a reader the `StagePostFired` a merged
event stands for. A log written before (separate events) reads the same: every reader
takes `previous` as the `StagePostFired` before the `StagePreFired`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

from turnstream.core.events.base import Envelope, Stage, StageOutcome, changed, stamp
from turnstream.core.events.lifecycle import (
    PreviousStage,
    StagePostFired,
    StagePostFiredData,
    StagePreFired,
)
from turnstream.core.ids import derived_id

if TYPE_CHECKING:
    from turnstream.core.events.codec import Event


def joined(recorded: Sequence[Event], followed: Sequence[Event]) -> tuple[Event, ...]:
    """An answer's events, then the events the decider decided after them: a stage the
    answer closed last and the next one the decider entered first are one event, which
    keeps the `StagePreFired`'s id and takes the `StagePostFired`'s causation."""
    if recorded and followed:
        post, pre = recorded[-1], followed[0]
        if type(post) is StagePostFired and type(pre) is StagePreFired and _pair(post, pre):
            return (*recorded[:-1], _merged(post, pre), *followed[1:])
    return (*recorded, *followed)


def _pair(post: StagePostFired, pre: StagePreFired) -> bool:
    """`pre` follows `post` in one turn, caused by it, and can carry it losslessly."""
    return (
        pre.data.previous is None
        and pre.causation_id == post.id
        and post.turn_id is not None
        and pre.session_id == post.session_id
        and pre.chat_id == post.chat_id
        and pre.turn_id == post.turn_id
        and pre.trace_id == post.trace_id
        and pre.correlation_id == post.correlation_id
        and pre.source == post.source
        and pre.schema_version == post.schema_version
    )


def _merged(post: StagePostFired, pre: StagePreFired) -> StagePreFired:
    left = post.data
    if post.time == pre.time:  # as in one decision: the same few, so validated once each
        previous = _left_at_once(left.stage, left.iteration, left.outcome)
    else:
        previous = PreviousStage(
            stage=left.stage, iteration=left.iteration, outcome=left.outcome, ended_at=post.time
        )
    return changed(pre, causation_id=post.causation_id, data=changed(pre.data, previous=previous))


@lru_cache(maxsize=1024)
def _left_at_once(stage: Stage, iteration: int, outcome: StageOutcome) -> PreviousStage:
    """A stage left the moment the next was entered, as the merged event carries it."""
    return PreviousStage(stage=stage, iteration=iteration, outcome=outcome, ended_at=None)


def stage_left(event: StagePreFired) -> StagePostFired | None:
    """The `StagePostFired` that a merged `event` stands for (None if it is not merged): its
    id derived from the event's, its time the one the stage ended at."""
    previous = event.data.previous
    if previous is None:
        return None
    at = previous.ended_at or event.time
    data = StagePostFiredData(
        stage=previous.stage, iteration=previous.iteration, outcome=previous.outcome
    )
    return stamp(
        StagePostFired,
        data,
        Envelope.of(event),
        event_id=derived_id(event.id, "previous", at),
        time=at,
        source=event.source,
        causation_id=event.causation_id,
    )


def unmerged(events: Iterable[Event]) -> list[Event]:
    """`events` with each merged `StagePreFired` as the two events it stands for (the form
    a log written before schema version 2 has)."""
    out: list[Event] = []
    for event in events:
        if isinstance(event, StagePreFired) and (left := stage_left(event)) is not None:
            bare = event.data.model_copy(update={"previous": None})
            out += [left, event.model_copy(update={"causation_id": left.id, "data": bare})]
        else:
            out.append(event)
    return out
