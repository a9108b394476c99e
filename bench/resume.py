"""Finding the sessions with an open turn when a turn-runner starts, two ways, one run.

    python bench/resume.py [--sessions 2000] [--turns 20]

A log of `--sessions` sessions with `--turns` ended turns each (a `SessionTurnStart` and a
`SessionTurnEnd` per turn) and one more open turn in every 20th session, then, alternating
five times:
  read    every `SessionTurnStart` and `SessionTurnEnd` of the log read and decoded, the
          open turns matched by id (what the runner did up to this change)
  counts  the server's message count per subject for both kinds (`bus.scan.subject_counts`,
          what the runner does now): a session with more starts than ends has one open
Both must find the same sessions.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console

from turnstream.bus import Bus, connect
from turnstream.bus.contract import LOG_START
from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.scan import subject_counts
from turnstream.bus.streams import StreamLimits
from turnstream.core.events import (
    Sender,
    SessionTurnEnd,
    SessionTurnEndData,
    SessionTurnStart,
    SessionTurnStartData,
)
from turnstream.core.subjects import Subjects
from turnstream.runtime import new_event_id, now

console = Console(highlight=False)
SENDER = Sender(kind="human", id="u1")


def turn(session: str, n: int, *, ended: bool) -> list[SessionTurnStart | SessionTurnEnd]:
    envelope = {
        "time": now(),
        "session_id": session,
        "chat_id": "c",
        "turn_id": f"{session}-t{n}",
        "trace_id": "tr",
        "correlation_id": "k",
        "source": "bench/1",
    }
    start = SessionTurnStart(
        id=new_event_id(),
        data=SessionTurnStartData(input_id=f"{session}-i{n}", text="hi", sender=SENDER),
        **envelope,
    )
    end = SessionTurnEnd(id=new_event_id(), data=SessionTurnEndData(status="completed"), **envelope)
    return [start, end] if ended else [start]


async def by_reading(bus: Bus) -> set[str]:
    started = await bus.store.read_kind("SessionTurnStart", since=LOG_START)
    ended = {s.event.turn_id for s in await bus.store.read_kind("SessionTurnEnd", since=LOG_START)}
    return {s.event.session_id for s in started if s.event.turn_id not in ended}


async def by_counting(bus: Bus) -> set[str]:
    subjects = bus.subjects

    async def per_session(kind: str) -> dict[str, int]:
        counts = await subject_counts(bus.nc, subjects.log_stream, subjects.log_kind(kind))
        return {subjects.session_from_log(subject): n for subject, n in counts.items()}

    starts, ends = await per_session("SessionTurnStart"), await per_session("SessionTurnEnd")
    return {session for session, n in starts.items() if n > ends.get(session, 0)}


async def main(sessions: int, turns: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, EmbeddedServer(Path(tmp)) as server:
        bus = await connect(server.url, Subjects("ts"), ensure=StreamLimits())
        events = []
        for s in range(sessions):
            for n in range(turns):
                events += turn(f"s{s}", n, ended=True)
            if s % 20 == 0:
                events += turn(f"s{s}", turns, ended=False)
        for start in range(0, len(events), 2000):
            await bus.store.append_facts(events[start : start + 2000])
        console.print(f"log: {len(events):,} events, {sessions:,} sessions")
        times: dict[str, list[float]] = {"read": [], "counts": []}
        found = {}
        for _ in range(5):
            for name, way in (("read", by_reading), ("counts", by_counting)):
                begin = time.perf_counter()
                found[name] = await way(bus)
                times[name].append(time.perf_counter() - begin)
        assert found["read"] == found["counts"], "the two ways disagree"
        read, counts = (statistics.median(times[k]) * 1000 for k in ("read", "counts"))
        console.print(f"sessions with an open turn: {len(found['counts'])} (both ways)")
        console.print(f"read every start and end: {read:,.0f} ms (median of 5)")
        console.print(f"count per subject:        {counts:,.0f} ms ({read / counts:.0f}× faster)")
        await bus.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(main(args.sessions, args.turns))
