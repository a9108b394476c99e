"""Turn latency and throughput next to the raw JetStream floor, in one run.

    python bench/turns.py [--turns 2000] [--json bench/results/turns.json]

Starts an embedded nats-server and the services as separate processes (as `turnstream
up` does), then measures:
  floor     a 1 KB event appended with ack, and delivered through an ordered consumer (p50)
  text      publish inbound → `TurnEnded` observed, scripted provider with zero delay,
            K = 1, 10, 50 concurrent sessions (p50, p99, turns/s)
  one-tool  the same with one `read_file` call per turn, approved by `auto` mode
            (5 cross-service hops: client→gateway→runner→executor→runner→client; the
            runner applies the approval rules itself, the approval service only acks)
  depth     turns 1-5 against turns 46-50 of the same sessions (nothing may grow)
  CPU       what each process (services, nats-server, this client) spent per turn at K = 50:
            the sum bounds throughput on this machine's cores; the sum at K = 1 and 10 too
  first     turns that each open a new session (K = 50): CPU per turn against a later turn,
            per process too
  writes    log events and session-summary KV writes per turn at K = 50 (what the server
            stores for each turn)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import stack
from rich.console import Console
from rich.table import Table

from turnstream.bus import Bus, connect
from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.streams import StreamLimits
from turnstream.client import message_command
from turnstream.core.subjects import Subjects

console = Console(highlight=False)
SCRIPTS = {
    "text": 'replies:\n  - {text: "ok {input:20}", chunks: whole}\n',
    "one-tool": (
        "replies:\n"
        "  - {tool_calls: [{name: read_file, arguments: {path: bench.txt}}]}\n"
        '  - {text: "read {last_tool_result:20}", chunks: whole}\n'
    ),
}
HOPS = {"text": 3, "one-tool": 5}
"""Cross-service hops on a turn's critical path (client→gateway→runner→client, …)."""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def floor(bus: Bus, n: int = 2000) -> dict[str, float]:
    """Append-with-ack and ordered-consumer delivery of 1 KB events, one at a time."""
    payload = orjson.dumps({"pad": "x" * 1000})
    subject = bus.subjects.log("bench-floor", "Floor")
    delivered: dict[int, float] = {}
    arrived = asyncio.Event()

    async def on_msg(msg: Any) -> None:
        delivered[msg.metadata.sequence.stream] = time.perf_counter()
        arrived.set()

    sub = await bus.js.subscribe(
        bus.subjects.log_session("bench-floor"), ordered_consumer=True, cb=on_msg
    )
    acks, deliveries = [], []
    for _ in range(n):
        arrived.clear()
        start = time.perf_counter()
        ack = await bus.js.publish(subject, payload)
        acks.append(time.perf_counter() - start)
        while ack.seq not in delivered:
            await asyncio.wait_for(arrived.wait(), 5)
            arrived.clear()
        deliveries.append(delivered[ack.seq] - start)
    await sub.unsubscribe()
    return {
        "append_ack_p50_ms": pct(acks, 0.5) * 1000,
        "append_to_delivery_p50_ms": pct(deliveries, 0.5) * 1000,
    }


class TurnWatcher:
    """One subscription to every TurnEnded; resolves the waiter of each correlation id."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.waiters: dict[str, asyncio.Future[float]] = {}

    async def start(self) -> None:
        subjects = self.bus.subjects
        # bench/compare.py runs this against older revisions, whose Subjects lack it
        live = getattr(subjects, "log_kind_live", subjects.log_kind)
        await self.bus.nc.subscribe(live("TurnEnded"), cb=self.on_msg)

    async def on_msg(self, msg: Any) -> None:
        at = time.perf_counter()
        key = orjson.loads(msg.data)["correlationId"]
        waiter = self.waiters.pop(key, None)
        if waiter and not waiter.done():
            waiter.set_result(at)

    async def turn(self, session: str, text: str) -> float:
        command = message_command(session, text)
        key = command["idempotencyKey"]
        waiter = asyncio.get_running_loop().create_future()
        self.waiters[key] = waiter
        start = time.perf_counter()
        await self.bus.js.publish(
            self.bus.subjects.inbound(session), orjson.dumps(command), headers={"Nats-Msg-Id": key}
        )
        return await asyncio.wait_for(waiter, 30) - start


async def concurrent(
    watcher: TurnWatcher, k: int, total: int, tag: str, *, new_sessions: bool = False
) -> dict[str, float]:
    """`total` turns from `k` workers, each on its own session, or each turn on a new
    session (`new_sessions`: a chat product's common case, every turn a first one)."""
    latencies: list[float] = []
    per_worker = max(1, total // k)

    async def worker(i: int) -> None:
        for n in range(per_worker):
            session = f"bench-{tag}-{i}-{n}" if new_sessions else f"bench-{tag}-{i}"
            latencies.append(await watcher.turn(session, f"turn {n}"))

    start = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(k)))
    elapsed = time.perf_counter() - start
    return {
        "k": k,
        "turns": len(latencies),
        "p50_ms": pct(latencies, 0.5) * 1000,
        "p99_ms": pct(latencies, 0.99) * 1000,
        "turns_per_s": len(latencies) / elapsed,
    }


async def depth(watcher: TurnWatcher, sessions: int = 6, turns: int = 50) -> dict[str, float]:
    by_index: dict[int, list[float]] = {i: [] for i in range(turns)}
    for s in range(sessions):
        for i in range(turns):
            by_index[i].append(await watcher.turn(f"bench-depth-{s}", f"turn {i}"))
    early = [v for i in range(5) for v in by_index[i]]
    late = [v for i in range(turns - 5, turns) for v in by_index[i]]
    first, last = statistics.median(early) * 1000, statistics.median(late) * 1000
    return {"turns_1_5_p50_ms": first, "turns_46_50_p50_ms": last, "ratio": last / first}


async def stored(bus: Bus) -> dict[str, int]:
    """How many messages the log and the summaries bucket have taken so far."""
    names = {"log events": bus.subjects.log_stream, "summary writes": _kv(bus.subjects)}
    return {k: (await bus.js.stream_info(v)).state.last_seq for k, v in names.items()}


def _kv(subjects: Subjects) -> str:
    return f"KV_{subjects.sessions_bucket}"


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """User + system CPU seconds each process has used so far (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    used = {}
    for name, pid in pids.items():
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        used[name] = (int(fields[11]) + int(fields[12])) / tick
    return used


async def scenario(
    args: argparse.Namespace, url: str, name: str, pids: dict[str, int]
) -> dict[str, Any]:
    bus = await connect(url, Subjects("ts"), ensure=StreamLimits())
    watcher = TurnWatcher(bus)
    await watcher.start()
    try:
        await concurrent(watcher, 10, 200, f"warm-{name}")  # warm up every process
        turns: list[dict[str, float]] = []
        cpu_by_k: dict[str, float] = {}
        for k in (1, 10, 50):
            before, stored_before = cpu_seconds(pids), await stored(bus)
            turns.append(
                await concurrent(
                    watcher, k, args.turns if k > 1 else args.turns // 4, f"{name}-k{k}"
                )
            )
            after = cpu_seconds(pids)
            cpu_by_k[str(k)] = sum(after[p] - before[p] for p in pids) * 1000 / turns[-1]["turns"]
        await asyncio.sleep(1.2)  # the audit writes summaries whose turn did not end within 1 s
        stored_after = await stored(bus)
        done = turns[-1]["turns"]  # what each process spent per turn at K = 50
        cpu = {p: (after[p] - before[p]) * 1000 / done for p in pids}
        writes = {k: (stored_after[k] - stored_before[k]) / done for k in stored_after}
        first_before = cpu_seconds(pids)
        first = await concurrent(watcher, 50, args.turns // 2, f"{name}-new", new_sessions=True)
        first_after = cpu_seconds(pids)
        first_cpu = {p: (first_after[p] - first_before[p]) * 1000 / first["turns"] for p in pids}
        first["cpu_ms_per_turn"] = sum(first_cpu.values())
        result: dict[str, Any] = {
            "turns": turns,
            "cpu_ms_per_turn_k50": cpu,
            "cpu_ms_per_turn_total_by_k": cpu_by_k,
            "stored_per_turn_k50": writes,
            "first_turns_k50": first,
            "first_turns_cpu_ms_k50": first_cpu,
        }
        if name == "text":
            result["depth"] = await depth(watcher)
        return result
    finally:
        await bus.close()


async def measure_floor(url: str) -> dict[str, float]:
    bus = await connect(url, Subjects("ts"), ensure=StreamLimits())
    try:
        return await floor(bus)
    finally:
        await bus.close()


def report(result: dict[str, Any]) -> None:
    f = result["floor"]
    floor_ms = f["append_to_delivery_p50_ms"]
    console.print(
        f"[bold]JetStream floor[/] (1 KB): append+ack p50 {f['append_ack_p50_ms']:.3f} ms, "
        f"append→ordered-consumer delivery p50 {floor_ms:.3f} ms"
    )
    table = Table(
        "turn", "K", "turns", "p50 ms", "p99 ms", "turns/s", "p50 / floor", "p50 / path floor"
    )
    for name in SCRIPTS:
        path_floor = HOPS[name] * floor_ms
        for row in result[name]["turns"]:
            table.add_row(
                name,
                str(row["k"]),
                str(row["turns"]),
                f"{row['p50_ms']:.2f}",
                f"{row['p99_ms']:.2f}",
                f"{row['turns_per_s']:.0f}",
                f"{row['p50_ms'] / floor_ms:.1f}×",
                f"{row['p50_ms'] / path_floor:.1f}× of {path_floor:.2f}",
            )
    console.print(table)
    firsts = [f"{name}, first turns" for name in SCRIPTS]
    cpu = Table("CPU ms per turn at K = 50", *SCRIPTS, *firsts, title_justify="left")
    names = list(result["text"]["cpu_ms_per_turn_k50"])
    for process in [*names, "total"]:
        cells = []
        for key in ("cpu_ms_per_turn_k50", "first_turns_cpu_ms_k50"):
            for name in SCRIPTS:
                spent = result[name].get(key, {})  # older results have no first turns'
                figure = sum(spent.values()) if process == "total" else spent.get(process, 0)
                cells.append(f"{figure:.2f}")
        cpu.add_row(process, *cells)
    console.print(cpu)
    stored_line = "; ".join(
        f"{name} "
        + ", ".join(f"{n:.1f} {what}" for what, n in result[name]["stored_per_turn_k50"].items())
        for name in SCRIPTS
    )
    console.print(f"stored per turn at K = 50: {stored_line}")
    cores = os.cpu_count() or 1
    for name in SCRIPTS:
        total = sum(result[name]["cpu_ms_per_turn_k50"].values())
        console.print(
            f"{name}: {total:.1f} ms of CPU per turn → at most {cores * 1000 / total:.0f} "
            f"turns/s on {cores} cores"
        )
    for name in SCRIPTS:
        by_k = result[name]["cpu_ms_per_turn_total_by_k"]
        first = result[name]["first_turns_k50"]
        console.print(
            f"{name}: CPU per turn, all processes, at K = "
            + ", ".join(f"{k}: {v:.1f} ms" for k, v in by_k.items())
            + f"; a new session's first turn (K = 50): {first['cpu_ms_per_turn']:.1f} ms, "
            f"{first['cpu_ms_per_turn'] / by_k['50']:.2f}× a later one, "
            f"{first['turns_per_s']:.0f} turns/s"
        )
    d = result["text"]["depth"]
    console.print(
        f"[bold]depth[/]: turns 1-5 p50 {d['turns_1_5_p50_ms']:.2f} ms, turns 46-50 p50 "
        f"{d['turns_46_50_p50_ms']:.2f} ms, ratio {d['ratio']:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=2000, help="turns per K>1 run")
    parser.add_argument("--json", type=Path, default=Path("bench/results/turns.json"))
    args = parser.parse_args()
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        stack.workspace(root, "auto")
        with EmbeddedServer(root / "nats") as server:
            result["floor"] = asyncio.run(measure_floor(server.url))
            for name, script in SCRIPTS.items():
                (root / f"{name}.yaml").write_text(script)
                with stack.running(server, root, root / f"{name}.yaml", console) as supervisor:
                    pids = stack.pids(supervisor, server)
                    result[name] = asyncio.run(scenario(args, server.url, name, pids))
    result["machine"] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }
    report(result)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
