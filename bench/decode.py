"""Decoding log events: the event adapter caching JSON keys only (as `core/events` does)
against pydantic-core's default (keys and values), side by side in one run.

    python bench/decode.py [--events 20000] [--rounds 7]

The events are one session's one-tool turns as the runner appends them (real event JSON,
ids all unique, as in a log). The cache of values pinned the last 16,384 decoded strings
(the ids) in a runner after a burst (docs/performance.md, "A burst of new sessions"); what
it saved in decoding is the question here.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import orjson
from pydantic import ConfigDict, TypeAdapter

sys.path.insert(0, str(Path(__file__).parents[1]))
from tests.unit.factories import accepted, run_turn, success
from turnstream.core.events import EVENT_ADAPTER, Event
from turnstream.core.session import SessionState, fold


def corpus(count: int) -> list[bytes]:
    """`count` events' JSON: turns of many sessions, so every id is new."""
    out: list[bytes] = []
    n = 0
    while len(out) < count:
        n += 1
        session = f"s{n}"
        state = fold(SessionState.of(session), [accepted(1, "hello", session=session)])
        _, events = run_turn(state, [success("hello back")])
        out += [orjson.dumps(e.model_dump(mode="json", by_alias=True)) for e in events]
    return out[:count]


def timed(adapter: TypeAdapter[Event], data: list[bytes]) -> float:
    started = time.perf_counter()
    for raw in data:
        adapter.validate_json(raw)
    return (time.perf_counter() - started) / len(data) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    data = corpus(args.events)
    default: TypeAdapter[Event] = TypeAdapter(Event, config=ConfigDict(cache_strings="all"))
    keys_only, everything = [], []
    for _ in range(args.rounds):  # alternating, so a noisy neighbour hits both alike
        keys_only.append(timed(EVENT_ADAPTER, data))
        everything.append(timed(default, data))
    k, a = statistics.median(keys_only), statistics.median(everything)
    print(f"{len(data):,} events, median of {args.rounds} rounds, µs per event decoded:")
    print(
        f"  keys only (core/events): {k:.2f}   keys and values (default): {a:.2f}   "
        f"ratio {k / a:.2f}"
    )


if __name__ == "__main__":
    main()
