"""The pure turn core without I/O: copying state, and one whole text turn.

    python bench/pure_core.py

Side by side in one run: `dataclasses.replace` against `with_changes` (the copy every
`evolve` makes), and a complete text turn (16 events) decided as the shell does it now
(the deciders fold as they go and hand over the state: `Decision.state`) and as it did
before (folding the decided events once more), and as the runner's actor drives it now:
one input at a time through the session decider, each decision with its effects.
"""

from __future__ import annotations

import sys
import timeit
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))
from tests.unit.factories import Ids, accepted, ctx, success
from turnstream.core.immutable import with_changes
from turnstream.core.inputs import Tick
from turnstream.core.session import SessionState, decide, fold
from turnstream.core.session.decider import ProviderDone
from turnstream.core.session.decider import decide as decide_input
from turnstream.core.turn import TurnConfig, on_provider_result
from turnstream.core.turn.state import ActiveTurn

N = 20_000


def main() -> None:
    turn = ActiveTurn("t", "i", "c", "tr", "k", None, "e", started_at=datetime.now(UTC))
    copies = {
        "dataclasses.replace": timeit.timeit(lambda: replace(turn, iteration=2), number=N),
        "with_changes": timeit.timeit(lambda: with_changes(turn, iteration=2), number=N),
    }
    for name, seconds in copies.items():
        print(f"{name:>20}: {seconds / N * 1e6:6.2f} µs per copy of ActiveTurn")
    ratio = copies["dataclasses.replace"] / copies["with_changes"]
    print(f"{'':>20}  with_changes is {ratio:.1f}× faster")
    state = fold(SessionState.of("s1"), [accepted(1)])
    turns, rounds = 100, 7
    ways = {
        "now": lambda: text_turn(state, False),
        "folding again": lambda: text_turn(state, True),
        "by the session decider": lambda: text_turn_by_inputs(state),
    }
    # the ways take turns, round after round, and each keeps its best round: on a shared
    # machine a slow moment then hurts every way alike instead of whichever ran in it
    spent = dict.fromkeys(ways, float("inf"))
    for _ in range(rounds):
        for name, way in ways.items():
            spent[name] = min(spent[name], timeit.timeit(way, number=turns))
    for name, seconds in spent.items():
        print(f"{'a text turn, ' + name:>36}: {seconds / turns * 1e6:6.0f} µs for its 16 events")
    print(f"{'':>36}  now / folding again: {spent['now'] / spent['folding again']:.2f}")
    by_inputs = spent["by the session decider"] / spent["now"]
    print(f"{'':>36}  by the session decider / now: {by_inputs:.2f}")


def text_turn(state: SessionState, fold_again: bool) -> SessionState:
    """Decide a turn from its accepted input to its end, with one model reply."""
    config, c = TurnConfig(), ctx(Ids())
    decided = decide(state, config, c)
    state = fold(state, decided) if fold_again else decided.state
    outcome = on_provider_result(state.chat, success(), config, c)
    return fold(state, outcome) if fold_again else outcome.state


def text_turn_by_inputs(state: SessionState) -> SessionState:
    """The same turn as the runner's actor drives it now: inputs in, decisions with their
    effects out (`turnstream.core.session.decider`)."""
    config, c = TurnConfig(), ctx(Ids())
    decided = decide_input(state, Tick(), config, c)
    assert decided.state.chat.active is not None
    done = ProviderDone(decided.state.chat.active.turn_id, success())
    return decide_input(decided.state, done, config, c).state


if __name__ == "__main__":
    main()
