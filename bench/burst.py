"""A busy hour's burst of new sessions (issue 42): N sessions at once against the same N at
a steady pace, each on a deployment of its own as `turnstream up` starts it (one runner,
one log partition, text-only scripted turns, approvals auto).

    python bench/burst.py [--sessions 20000] [--steady-k 50] [--only burst|steady]

Burst: every `message` command (one per new session) is published as fast as one raw NATS
client can, then the run waits for every turn's `TurnEnded`. Steady: the same N, with at
most `--steady-k` turns open at a time (a new session published as one ends). For each:
seconds until all ended, turns/s per tenth of the run, leases the runner lost (its log's
`lost the lease` lines), facts redelivered to it (the consumer's `num_redelivered`),
`TurnEnded` per session (exactly once: 1.00), and each process's RSS idle, at the end and
after a settle. The goal: burst seconds at most 1.5 times steady seconds, no lease lost,
RSS at the end at most 1.5 times idle.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import stack
from memory import SCRIPT, rss_mib
from rich.console import Console
from rich.table import Table
from turns import cpu_seconds

from turnstream.bus import Bus, connect
from turnstream.bus.streams import StreamLimits
from turnstream.client import message_command
from turnstream.core.subjects import Subjects

console = Console(highlight=False)
SETTLE_S = 5.0
"""After the last turn: idle actors retire, leases are released, memory is given back."""
TIMEOUT_S = 1800.0
IDLE_WAIT_S = 30.0


class Ends:
    """Every `TurnEnded`, by session, with when it came."""

    def __init__(self) -> None:
        self.by_session: dict[str, int] = {}
        self.times: list[float] = []
        self.changed = asyncio.Event()

    async def on_msg(self, msg: Any) -> None:
        session = orjson.loads(msg.data)["sessionId"]
        self.by_session[session] = self.by_session.get(session, 0) + 1
        self.times.append(time.perf_counter())
        self.changed.set()

    async def until(self, n: int) -> None:
        async with asyncio.timeout(TIMEOUT_S):
            while len(self.by_session) < n:
                self.changed.clear()
                await self.changed.wait()


async def publish(bus: Bus, session: str) -> None:
    command = message_command(session, "hello " + "x" * 100)
    await bus.js.publish(
        bus.subjects.inbound(session),
        orjson.dumps(command),
        headers={"Nats-Msg-Id": command["idempotencyKey"]},
    )


async def burst(bus: Bus, ends: Ends, n: int) -> float:
    started = time.perf_counter()
    for first in range(0, n, 500):  # pipelined: the client's own limit on acks in flight
        await asyncio.gather(*(publish(bus, f"b-{i}") for i in range(first, min(n, first + 500))))
    console.print(f"  published {n} in {time.perf_counter() - started:.1f} s")
    await ends.until(n)
    return started


async def steady(bus: Bus, ends: Ends, n: int, k: int) -> float:
    started = time.perf_counter()
    sent = 0
    while sent < n:
        open_now = sent - len(ends.by_session)
        if open_now < k:
            await asyncio.gather(*(publish(bus, f"s-{sent + i}") for i in range(k - open_now)))
            sent += k - open_now
            continue
        ends.changed.clear()
        await ends.changed.wait()
    await ends.until(n)
    return started


async def sample_cpu(pids: dict[str, int], into: list[tuple[float, dict[str, float]]]) -> None:
    """Each process's CPU seconds so far, once a second."""
    while True:
        into.append((time.perf_counter(), cpu_seconds(pids)))
        await asyncio.sleep(1.0)


def cpu_by_tenth(
    samples: list[tuple[float, dict[str, float]]], started: float, took: float
) -> dict[str, list[float]]:
    """Each process's share of a core in each tenth of the run (from the samples)."""
    shares: dict[str, list[float]] = {name: [] for name in samples[0][1]}
    for tenth in range(10):
        begin, end = started + took * tenth / 10, started + took * (tenth + 1) / 10
        before = [s for s in samples if s[0] <= begin] or samples[:1]
        upto = [s for s in samples if s[0] <= end] or samples[:1]
        first, last = before[-1], upto[-1]
        span = max(last[0] - first[0], 1e-6)
        for name in shares:
            shares[name].append(round((last[1][name] - first[1][name]) / span, 2))
    return shares


async def run(url: str, mode: str, n: int, k: int, pids: dict[str, int]) -> dict[str, Any]:
    bus = await connect(url, Subjects("ts"), ensure=StreamLimits())
    ends = Ends()
    await bus.nc.subscribe(bus.subjects.log_kind_live("TurnEnded"), cb=ends.on_msg)
    samples: list[tuple[float, dict[str, float]]] = []
    sampling = asyncio.ensure_future(sample_cpu(pids, samples))
    try:
        started = await (
            burst(bus, ends, n) if mode == "burst" else steady(bus, ends, n, min(k, n))
        )
        took = max(ends.times) - started
        tenths = [0] * 10
        for at in ends.times:
            tenths[min(9, int((at - started) / took * 10))] += 1
        info = await bus.js.consumer_info(bus.subjects.log_stream, "turn-runner")
        return {
            "seconds": took,
            "turns_per_s": n / took,
            "turns_per_s_by_tenth": [round(c / (took / 10), 1) for c in tenths],
            "turn_ended_per_session": sum(ends.by_session.values()) / len(ends.by_session),
            "redelivered": info.num_redelivered,
            "cpu_by_tenth": cpu_by_tenth(samples, started, took),
        }
    finally:
        sampling.cancel()
        await bus.close()


def steady_rss(pids: dict[str, int]) -> dict[str, float]:
    """Each process's RSS once none grew by more than 0.5 MiB in a second (at most
    `IDLE_WAIT_S`): on a loaded machine the services are still importing after the stack's
    start-up pause, and an idle figure read then is too low."""
    before = {name: rss_mib(pid) for name, pid in pids.items()}
    deadline = time.monotonic() + IDLE_WAIT_S
    while True:
        time.sleep(1.0)
        now = {name: rss_mib(pid) for name, pid in pids.items()}
        if all(now[name] - before[name] <= 0.5 for name in now) or time.monotonic() > deadline:
            return now
        before = now


def deployment(mode: str, n: int, k: int) -> dict[str, Any]:
    with stack.scripted(SCRIPT, console) as running:
        pids = running.pids
        idle = steady_rss(pids)
        result = asyncio.run(run(running.server.url, mode, n, k, pids))
        result["rss_end"] = {name: rss_mib(pid) for name, pid in pids.items()}
        time.sleep(SETTLE_S)
        result["rss_settled"] = {name: rss_mib(pid) for name, pid in pids.items()}
        result["rss_idle"] = idle
        runner_log = (running.root / "turn_runner.log").read_text(errors="replace")
        result["leases_lost"] = runner_log.count("lost the lease")
        result["direct_read_fallbacks"] = runner_log.count("with a consumer")
    return result


def report(results: dict[str, dict[str, Any]]) -> None:
    table = Table(title="a burst of new sessions against the same at a steady pace")
    table.add_column("")
    for mode in results:
        table.add_column(mode, justify="right")
    rows = (
        ("seconds until all ended", lambda r: f"{r['seconds']:.1f}"),
        ("turns/s", lambda r: f"{r['turns_per_s']:.0f}"),
        ("turns/s by tenth", lambda r: " ".join(f"{x:.0f}" for x in r["turns_per_s_by_tenth"])),
        ("TurnEnded per session", lambda r: f"{r['turn_ended_per_session']:.3f}"),
        ("leases lost by the runner", lambda r: str(r["leases_lost"])),
        ("facts redelivered to it", lambda r: str(r["redelivered"])),
        ("direct reads fallen back", lambda r: str(r["direct_read_fallbacks"])),
    )
    for name, cell in rows:
        table.add_row(name, *(cell(r) for r in results.values()))
    for name in next(iter(results.values()))["rss_idle"]:
        table.add_row(
            f"RSS MiB {name}: idle / end / settled",
            *(
                f"{r['rss_idle'][name]:.0f} / {r['rss_end'][name]:.0f} / "
                f"{r['rss_settled'][name]:.0f}"
                for r in results.values()
            ),
        )
    console.print(table)
    for mode, result in results.items():
        console.print(f"{mode}: share of a core by tenth of the run")
        for name, shares in result["cpu_by_tenth"].items():
            console.print(f"  {name:14} " + " ".join(f"{x:4.2f}" for x in shares))
    if {"burst", "steady"} <= set(results):
        ratio = results["burst"]["seconds"] / results["steady"]["seconds"]
        console.print(f"burst / steady seconds: {ratio:.2f} (goal ≤ 1.5)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=20_000)
    parser.add_argument("--steady-k", type=int, default=50)
    parser.add_argument("--only", choices=("burst", "steady"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    modes = [args.only] if args.only else ["steady", "burst"]
    results = {}
    for mode in modes:
        console.print(f"[bold]{mode}[/]: {args.sessions} new sessions")
        results[mode] = deployment(mode, args.sessions, args.steady_k)
    report(results)
    if args.json:
        args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    sys.exit(main())
