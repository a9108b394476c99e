"""Folds written once: `projector` turns a per-event `evolve` into a fold of many events, and
`until_quiet` takes a decider's steps until one has nothing more to say (each step decides
from the state the last one left). Turn, session and approval state all use both, and
each decider answers with a `Decision`: the events, the state they fold to, the effects."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, Never, overload

from typing_extensions import TypeVar

from turnstream.core.events import Event

S = TypeVar("S")
S_co = TypeVar("S_co", covariant=True)
F_co = TypeVar("F_co", covariant=True, default=Never)
"""A decision's state, and its effects: the session's `Effect` union (`SessionDecision`),
the approval's `WakeAt`; none for a step inside a turn."""


@dataclass(frozen=True, slots=True)
class Decision(Sequence[Event], Generic[S_co, F_co]):
    """A decider's events, in order, the state they fold to, and what that state asks the
    shell to do.

    The deciders fold as they go (each step decides from the state the last one left), so
    they hand that state on and the shell need not fold the same events again. It is a
    sequence of its events, so code that only wants the events reads it as one.
    """

    events: tuple[Event, ...]
    state: S_co
    effects: tuple[F_co, ...] = ()

    def after(self, events: Iterable[Event]) -> Decision[S_co, F_co]:
        """`events` first, then these (what follows from them): the same final state."""
        return Decision((*events, *self.events), self.state, self.effects)

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    def __len__(self) -> int:
        return len(self.events)

    @overload
    def __getitem__(self, index: int) -> Event: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Event]: ...

    def __getitem__(self, index: int | slice) -> Event | Sequence[Event]:
        return self.events[index]


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
    next_step: Callable[[S], Sequence[Event]],
    fold: Callable[[S, Iterable[Event]], S],
    out: Iterable[Event] = (),
) -> Decision[S]:
    """`out`, then every step's events until a step is empty, and the state they fold to."""
    events = list(out)
    while step := next_step(state):
        events.extend(step)
        state = fold(state, step)
    return Decision(tuple(events), state)
