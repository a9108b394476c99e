"""The pure turn core without I/O: copying state, and one whole text turn.

    python bench/pure_core.py

Side by side in one run: `dataclasses.replace` against `with_changes` (the copy every
`evolve` makes), and a complete text turn (16 events) decided and folded as the shell
does it (decide folds as it goes; the shell folds the decided events once more).
"""

from __future__ import annotations

import sys
import timeit
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))
from tests.unit.factories import accepted, run_turn, success
from turnstream.core.turn import SessionState, fold
from turnstream.core.turn.state import ActiveTurn, with_changes

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
    state = fold(SessionState("s1"), [accepted(1)])
    turns = 500
    seconds = timeit.timeit(lambda: run_turn(state, [success()]), number=turns)
    print(f"{'a text turn':>20}: {seconds / turns * 1e6:6.0f} µs for decide + fold of 16 events")


if __name__ == "__main__":
    main()
