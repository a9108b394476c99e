"""What the audit keeps for each open turn, beside what it kept before, in one run.

    .venv/bin/python bench/audit_open_turns.py [--turns 20000]

`--turns` sessions each start a turn (a decoded `SessionTurnStart`, as the audit reads
them); tracemalloc counts the bytes left allocated per open turn when the audit's fold
takes them in, and the bytes when the decoded event itself is kept (what the checks' timer
held until `OpenTurn`).
"""

from __future__ import annotations

import argparse
import gc
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.unit.audit_events import start
from turnstream.audit.auditor import Auditor
from turnstream.core.events import decode, encode


def bytes_per_turn(raw: list[bytes], keep: Callable[[list[bytes]], Any]) -> float:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    kept = keep(raw)
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    del kept
    return grown / len(raw)


def audit_fold(raw: list[bytes]) -> Auditor:
    auditor = Auditor()
    for seq, data in enumerate(raw, 1):
        auditor.apply(seq, decode(data))
    auditor.take_dirty()
    return auditor


def decoded_events(raw: list[bytes]) -> list[Any]:
    return [decode(data) for data in raw]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20_000)
    args = parser.parse_args()
    raw = [
        encode(start(f"s-{n:08d}-abcdefgh", f"t-{n:08d}-0123456789ab")) for n in range(args.turns)
    ]
    fold = bytes_per_turn(raw, audit_fold)
    events = bytes_per_turn(raw, decoded_events)
    print(f"{args.turns} open turns, bytes each (tracemalloc)")
    print(f"  the audit's fold (summary, checks, the timer's OpenTurn): {fold:8.0f}")
    print(f"  the decoded SessionTurnStart alone (what the timer kept):  {events:8.0f}")


if __name__ == "__main__":
    main()
