"""What one session's read costs the server as the log grows (issue 42): a batched direct
get of a session's events (`next_by_subj ts.log.<s>.>`) asking for more than remain,
against one asking for exactly the session's count (what a runner's reload asks since).

    python bench/session_reads.py [--sessions 40000]

Each session has 4 events, written in order, so a session read early in the log has the
rest of the log after it. Per log size: ms per read of 100 early sessions, batch 500
against batch = count (plus the count itself: a stream info with a subjects filter).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import nats
from rich.console import Console

from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.scan import DirectReads, log_count
from turnstream.core.subjects import Subjects

console = Console(highlight=False)
KINDS = ("InputAccepted", "SessionTurnStart", "StagePreFired", "TurnEnded")


async def measure(url: str, sessions: int) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream(publish_async_max_pending=8192)
    await js.add_stream(name="L", subjects=["ts.log.>"], allow_direct=True)
    reads, subjects = DirectReads(nc), Subjects("ts")
    written = 0
    for size in (1_000, sessions // 4, sessions):
        while written < size:
            acks = [
                await js.publish_async(f"ts.log.s{n}.{kind}", b"x" * 300)
                for n in range(written, written + 500)
                for kind in KINDS
            ]
            await asyncio.gather(*acks)
            written += 500
        row = []
        for counted in (False, True):
            started = time.perf_counter()
            for n in range(100):
                got: list[int] = []
                count = None
                if counted:
                    count = await log_count(js, subjects, f"ts.log.s{n}.>", stream="L")
                await reads.read(
                    "L", f"ts.log.s{n}.>", lambda seq, *_, got=got: got.append(seq), count=count
                )
                assert len(got) == len(KINDS)
            row.append((time.perf_counter() - started) / 100 * 1000)
        console.print(
            f"{written * len(KINDS):>8,} events: read {row[0]:6.2f} ms; "
            f"counted, then read exactly {row[1]:5.2f} ms ({row[0] / row[1]:.1f}x)"
        )
    await nc.drain()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=40_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, EmbeddedServer(Path(tmp)) as server:
        asyncio.run(measure(server.url, args.sessions))


if __name__ == "__main__":
    sys.exit(main())
