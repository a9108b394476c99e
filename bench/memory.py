"""Memory of every service over waves of new sessions: does it level off?

    python bench/memory.py [--waves 3] [--sessions 1000] [--json bench/results/memory.json]

Starts an embedded nats-server and the services as separate processes (as `turnstream
up` does). Each wave opens N new sessions with one text turn each, waits until every
turn's `TurnEnded` is in the log, lets the services settle, then reads each process's
resident set size from /proc. A service that forgets what it no longer needs (idle
session actors, ended turns' audit facts) leaves later waves near where the first left it;
one that keeps everything grows with every wave. Printed: RSS after each wave and the
last wave's over the first (the goal: within 1.10).
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys
import time
from pathlib import Path

import orjson
import stack
from rich.console import Console

from turnstream.bus import connect
from turnstream.bus.scan import subject_counts
from turnstream.bus.streams import StreamLimits
from turnstream.client import message_command, publish_command
from turnstream.core.subjects import Subjects

console = Console(highlight=False, width=160)
SCRIPT = 'replies:\n  - {text: "noted: {input}", chunks: whole}\n'
SETTLE_S = 3.0
"""After a wave: the audit's counters are written once a second, idle actors retire."""


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def wave(url: str, subjects: Subjects, n: int, first: int) -> float:
    """Open sessions first..first+n-1 with one turn each; seconds until all ended."""
    bus = await connect(url, subjects, ensure=StreamLimits())
    try:
        started = time.perf_counter()
        sessions = [f"mem-{i}" for i in range(first, first + n)]
        for batch in range(0, n, 200):
            await asyncio.gather(
                *(
                    publish_command(bus, s, message_command(s, "remember " + "x" * 200))
                    for s in sessions[batch : batch + 200]
                )
            )
        wanted = set(sessions)
        async with asyncio.timeout(300):
            while True:
                counts = await subject_counts(
                    bus.nc, subjects.log_stream, subjects.log_kind("TurnEnded")
                )
                if wanted <= {subjects.session_from_log(s) for s in counts}:
                    return time.perf_counter() - started
                await asyncio.sleep(0.25)
    finally:
        await bus.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--waves", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    subjects = Subjects()
    rows: list[dict[str, object]] = []
    with stack.scripted(SCRIPT, console) as deployment:
        for n in range(args.waves):
            url = deployment.server.url
            took = asyncio.run(wave(url, subjects, args.sessions, n * args.sessions))
            time.sleep(SETTLE_S)
            rss = {name: rss_mib(pid) for name, pid in deployment.pids.items()}
            rows.append({"wave": n + 1, "seconds": round(took, 1), "rss_mib": rss})
            console.print(
                f"wave {n + 1}: {args.sessions} sessions in {took:.1f} s; RSS MiB "
                + ", ".join(f"{k} {v:.1f}" for k, v in rss.items())
            )
    first, last = rows[0]["rss_mib"], rows[-1]["rss_mib"]
    assert isinstance(first, dict) and isinstance(last, dict)
    console.print(f"\nRSS after wave {len(rows)} over wave 1 ({platform.python_version()}):")
    for name in first:
        if not first[name] or not last[name]:
            console.print(f"  {name:14} not running (no RSS to compare)")
            continue
        ratio = last[name] / first[name]
        mark = "ok" if ratio <= 1.10 else "grows"
        change = f"{first[name]:7.1f} -> {last[name]:7.1f} MiB  x{ratio:.2f}"
        console.print(f"  {name:14} {change} {mark}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_bytes(orjson.dumps(rows, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    sys.exit(main())
