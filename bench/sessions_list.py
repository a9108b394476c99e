"""`turnstream sessions` over many sessions (issue 42): the default (the 20 changed last,
read from the bucket's tail) and `--limit 200`, as whole commands.

    python bench/sessions_list.py [--sessions 100000]

Fills the sessions bucket of an embedded server with that many summaries (as the audit
writes them), then times each command three times and prints min / median.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

from turnstream.bus import connect
from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.streams import StreamLimits
from turnstream.core.subjects import Subjects, session_key
from turnstream.core.summary import SessionSummary

console = Console(highlight=False)
TURNSTREAM = str(Path(sys.executable).parent / "turnstream")


async def fill(url: str, n: int) -> None:
    bus = await connect(url, Subjects("ts"), ensure=StreamLimits())
    bucket = bus.subjects.sessions_bucket
    for first in range(0, n, 1000):
        acks = [
            await bus.js.publish_async(
                f"$KV.{bucket}.{session_key(f'list-{i}')}",
                SessionSummary(session_id=f"list-{i}", turns=1, completed=1).to_json(),
            )
            for i in range(first, min(n, first + 1000))
        ]
        await asyncio.gather(*acks)
    await bus.close()


def timed(url: str, *args: str) -> list[float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTREAM_")}
    env |= {"TURNSTREAM_NATS_URL": url, "COLUMNS": "200"}
    took = []
    for _ in range(3):
        started = time.perf_counter()
        done = subprocess.run([TURNSTREAM, "sessions", *args], env=env, capture_output=True)
        assert done.returncode == 0, done.stderr[-2000:]
        took.append(time.perf_counter() - started)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, EmbeddedServer(Path(tmp)) as server:
        asyncio.run(fill(server.url, args.sessions))
        for label, options in (
            ("default (20 changed last)", ()),
            ("--limit 200", ("--limit", "200")),
        ):
            took = timed(server.url, *options)
            console.print(
                f"{args.sessions:,} sessions, `sessions` {label}: min {min(took):.2f} s, "
                f"median {statistics.median(took):.2f} s"
            )


if __name__ == "__main__":
    sys.exit(main())
