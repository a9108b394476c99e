"""Folds written once: `projector` turns a per-event `evolve` into a fold of many events, and
`until_quiet` takes a decider's steps until one has nothing more to say (each step decides
from the state the last one left). Turn, session and approval state all use both."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from turnstream.core.events import Event

S = TypeVar("S")


def projector(evolve: Callable[[S, Event], S]) -> Callable[[S, Iterable[Event]], S]:
    """The fold of `evolve`: `fold(state, events)` is `evolve` applied to each in order."""

    def fold(state: S, events: Iterable[Event]) -> S:
        for event in events:
            state = evolve(state, event)
        return state

    fold.__doc__ = f"Fold events with `{evolve.__module__}.{evolve.__qualname__}`."
    return fold


def until_quiet(
    state: S,
    next_step: Callable[[S], list[Event]],
    fold: Callable[[S, Iterable[Event]], S],
    out: list[Event] | None = None,
) -> tuple[list[Event], S]:
    """`out` (or a new list) with every step's events appended until a step is empty, and
    the state they fold to."""
    events = [] if out is None else out
    while step := next_step(state):
        events.extend(step)
        state = fold(state, step)
    return events, state
