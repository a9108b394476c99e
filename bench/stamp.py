"""Building an event, then encoding it: the validating constructor against `stamp`.

    python bench/stamp.py [--rounds 5]

Side by side in one process, interleaved rounds (the median of each), for every event kind
with the sample data of the contract test: µs per event to put it together, to encode it,
and the ratio new / old. Each service appends every event it builds through this path.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import timeit
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1]))
from tests.unit.test_contract import SAMPLE_DATA
from turnstream.core.events import EVENT_TYPES, Envelope, EventBase, encode, stamp

ENVELOPE = Envelope("session-1", "chat-1", "turn-1", "trace-1", "key-1")
NOW = datetime.now(UTC)


def validated(cls: type[EventBase], data: Any) -> EventBase:
    """What `stamp` did before: the validating constructor."""
    return cls(
        id="0199a000-0000-7000-8000-000000000001",
        time=NOW,
        session_id=ENVELOPE.session_id,
        chat_id=ENVELOPE.chat_id,
        turn_id=ENVELOPE.turn_id,
        trace_id=ENVELOPE.trace_id,
        correlation_id=ENVELOPE.correlation_id,
        causation_id="0199a000-0000-7000-8000-000000000000",
        source="turn-runner/bench",
        data=data,
    )


def stamped(cls: type[EventBase], data: Any) -> EventBase:
    return stamp(
        cls,
        data,
        ENVELOPE,
        event_id="0199a000-0000-7000-8000-000000000001",
        time=NOW,
        source="turn-runner/bench",
        causation_id="0199a000-0000-7000-8000-000000000000",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--number", type=int, default=2000, help="events per kind per round")
    args = parser.parse_args()
    kinds = [
        (cls, cls.model_fields["data"].annotation.model_validate(SAMPLE_DATA[kind]))  # type: ignore[union-attr]
        for kind, cls in sorted(EVENT_TYPES.items())
    ]
    for cls, data in kinds:
        assert encode(stamped(cls, data)) == encode(validated(cls, data))

    def per_event(build: Any, then_encode: bool) -> float:
        def run() -> None:
            for cls, data in kinds:
                event = build(cls, data)
                if then_encode:
                    encode(event)

        return timeit.timeit(run, number=args.number) / (args.number * len(kinds)) * 1e6

    times: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for name, build in (("constructor", validated), ("stamp", stamped)):
            times.setdefault(f"{name} build", []).append(per_event(build, False))
            times.setdefault(f"{name} build+encode", []).append(per_event(build, True))
    med = {name: statistics.median(values) for name, values in times.items()}
    print(f"{len(kinds)} event kinds, median of {args.rounds} interleaved rounds (µs per event)")
    for what in ("build", "build+encode"):
        old, new = med[f"constructor {what}"], med[f"stamp {what}"]
        print(f"  {what:>13}: constructor {old:6.2f}  stamp {new:6.2f}  new/old {new / old:.2f}")


if __name__ == "__main__":
    main()
