"""Faults at scale (issue 19): recovery of many open sessions after a turn-runner kill -9,
and turns/s before, during and after a broker outage. Printed, not asserted.

    python bench/faults.py [--sessions 1500] [--outage 15] [--rate 20]

Services run as separate processes on an embedded nats-server (tests/recovery/harness).
  recovery  N turns open (each waiting on a 20 s model reply), kill -9 the runner, start
            it again: time until every turn has ended (exactly once each), and that time
            less the 20 s reply (a turn re-asks the model after the restart), which is
            what the restart itself costs.
  outage    turns with one tool call submitted at --rate/s; nats-server stopped for
            --outage s and started again on the same port and store: turns ended per
            second before, during and after, by the TurnEnded event's time.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))

from tests.recovery.harness import deployment
from turnstream.bus import Bus
from turnstream.bus.scan import subject_counts
from turnstream.client import message_command, publish_command

RECOVERY_REPLY_S = 20
"""Long enough that no turn ends before the kill on a busy machine (1,500 take seconds to
start)."""
RECOVERY_SCRIPT = f"""
replies:
  - text: "done"
    delay_ms: {RECOVERY_REPLY_S * 1000}
    chunks: whole
"""
OUTAGE_SCRIPT = """
replies:
  - tool_calls: [{name: count_run, arguments: {file: runs.txt, seconds: 0.5}}]
  - text: "done after {last_tool_result}"
    chunks: whole
"""


async def counts(bus: Bus, kind: str) -> dict[str, int]:
    subjects = bus.subjects
    found = await subject_counts(bus.nc, subjects.log_stream, subjects.log_kind(kind))
    return {subjects.session_from_log(s): n for s, n in found.items()}


async def until(bus: Bus, kind: str, n: int, timeout: float) -> float:
    start = time.monotonic()
    async with asyncio.timeout(timeout):
        while True:
            if len(await counts(bus, kind)) >= n:
                return time.monotonic() - start
            await asyncio.sleep(0.25)


async def recovery(root: Path, sessions: int) -> None:
    names = [f"rec-{i}" for i in range(sessions)]
    async with deployment(root, RECOVERY_SCRIPT) as (d, bus):
        for i in range(0, sessions, 100):
            chunk = names[i : i + 100]
            await asyncio.gather(
                *(publish_command(bus, s, message_command(s, "hi")) for s in chunk)
            )
        await until(bus, "ProviderRequestStarted", sessions, 300)
        open_at_kill = sessions - len(await counts(bus, "TurnEnded"))
        d.kill9("turn_runner")
        killed = time.monotonic()
        d.start("turn_runner")
        await until(bus, "ProviderRequestStarted", sessions, 300)  # counted per session
        await until(bus, "TurnEnded", sessions, 300)
        took = time.monotonic() - killed
        await asyncio.sleep(2)
        ended = await counts(bus, "TurnEnded")
        once = sum(1 for n in ended.values() if n == 1)
        print(
            f"recovery: {open_at_kill}/{sessions} sessions open at the runner's kill -9 -> "
            f"all ended in {took:.1f} s, {took - RECOVERY_REPLY_S:.1f} s beyond the "
            f"{RECOVERY_REPLY_S} s model reply re-asked after the restart; "
            f"{once}/{sessions} ended exactly once"
        )


async def outage(root: Path, outage_s: float, rate: float) -> None:
    before_s, after_s = 10.0, 20.0
    async with deployment(root, OUTAGE_SCRIPT, TURNSTREAM_TOOL_CONCURRENCY="256") as (d, bus):
        submitted = [0]
        refused = [0]
        stop = asyncio.Event()

        async def submit() -> None:
            i = 0
            while not stop.is_set():
                session = f"out-{i}"
                try:
                    async with asyncio.timeout(2):
                        await publish_command(bus, session, message_command(session, "go"))
                    submitted[0] += 1
                    i += 1
                except Exception:
                    refused[0] += 1
                await asyncio.sleep(1 / rate)

        t0 = datetime.now(UTC)
        driver = asyncio.create_task(submit())
        await asyncio.sleep(before_s)
        down = datetime.now(UTC)
        d.server.stop()
        await asyncio.sleep(outage_s)
        d.server.start()
        up = datetime.now(UTC)
        await asyncio.sleep(after_s)
        stop.set()
        await driver
        end = datetime.now(UTC)
        async with asyncio.timeout(120):
            while True:
                if len(await counts(bus, "TurnEnded")) >= submitted[0]:
                    break
                await asyncio.sleep(0.5)
        ends = [s.event.time for s in await bus.store.read_kind("TurnEnded", since=t0)]
        alive = all(p.poll() is None for p in d.procs.values())

        def rate_in(a: datetime, b: datetime) -> float:
            n = sum(1 for t in ends if a <= t < b)
            return n / max((b - a).total_seconds(), 1e-9)

        late = [t for t in ends if t >= up]
        first_after = (min(late) - up).total_seconds() if late else float("nan")
        print(
            f"outage: {outage_s:g} s broker stop at {rate:g} submitted turns/s: "
            f"turns/s before {rate_in(t0, down):.1f}, during {rate_in(down, up):.1f}, "
            f"after {rate_in(up, end):.1f} (first end {first_after:.1f} s after restart); "
            f"{submitted[0]} submitted, {refused[0]} unacked while down (some stored after all), "
            f"{len(ends)} ended; services all up: {alive}"
        )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=1500)
    parser.add_argument("--outage", type=float, default=15)
    parser.add_argument("--rate", type=float, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        await recovery(Path(tmp) / "recovery", args.sessions)
    with tempfile.TemporaryDirectory() as tmp:
        await outage(Path(tmp) / "outage", args.outage, args.rate)


if __name__ == "__main__":
    asyncio.run(main())
