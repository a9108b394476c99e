"""One loop for every actor over a decider: commit an input's decision, perform the effects
it asks for, and commit their answer next, until there is none.

The session actor (`turnstream.turn_runner.session`), the approval actor and the unit
tests' in-memory driver all run it; each says what committing and performing mean.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

Input = TypeVar("Input")
Effect = TypeVar("Effect")
Effect_co = TypeVar("Effect_co", covariant=True)


class Decided(Protocol[Effect_co]):
    """A committed decision: what it asks the shell to do."""

    @property
    def effects(self) -> tuple[Effect_co, ...]: ...


class Interpreted(Protocol[Input, Effect]):
    """An actor the loop drives: it commits an input's decision and performs its effects."""

    async def commit(self, item: Input) -> Decided[Effect]:
        """Decide `item` and make the decision durable (append its events)."""
        ...

    async def perform(self, effects: tuple[Effect, ...]) -> Input | None:
        """Do what a decision asks; an answer to decide next (a hook's verdict), or None."""
        ...


async def run_until_quiet(actor: Interpreted[Input, Effect], item: Input, max_rounds: int) -> None:
    """Commit `item`, perform what its decision asks, commit the answer, and so on.

    `max_rounds` bounds the items committed in a row for one item (a hook's answer may
    let a turn reach the next hook). An answer past it is dropped: the state it answers
    still asks for it, so the next input's decision asks again.
    """
    next_item: Input | None = item
    for _ in range(max_rounds):
        if next_item is None:
            return
        decision = await actor.commit(next_item)
        next_item = await actor.perform(decision.effects)
