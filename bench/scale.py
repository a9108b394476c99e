"""How far one log stream goes (part 1), and every service as 1, 2, 3 instances (part 2).

    python bench/scale.py [--part 1|2|both] [--seconds 4] [--json bench/results/scale.json]
    python bench/scale.py --part 2 --quick      # a smoke run of part 2 (< 2 min)
    python bench/scale.py --part 2 --log-partitions 1,4   # part 2 at N = 1 and N = 4
    python bench/scale.py --part 2 --kills 20   # the handover's distribution over 20 kills

Part 1 is `TS_LOG`'s ceiling on this machine, at R1 and R3; part 2 (`scale_instances.py`,
described there) runs real service processes on the 3-node cluster as 1, 2 and 3 instances
each, with handover and leader-kill figures and a correctness check.

First one scripted one-tool turn runs through every service (as `turnstream up` runs
them) and its log is read back: each event's type, payload and header sizes, which
service appended it, and how the appends were grouped (a runner decision is one
fast-ingest batch that opens with the conditional `Nats-Expected-Last-Subject-Sequence`
event; the gateway's and the executor's facts are single appends). That turn is then
replayed, sizes and batching as they are today, against:
  R1   one embedded node (`EmbeddedServer` as `turnstream up` starts it)
  R3   the 3-node loopback cluster (tests/cluster's `start_cluster`: the shipped
       ops/nats-cluster-*.conf, sync_interval always, ops/accounts.conf, each service's
       appends as its own user)
with the streams `turnstream streams apply` defines (`ensure_streams`) and the
services' own appender (`PipelinedAppender`). For each:
  append    several publishers (one connection per appending service, as three
            services), each with many sessions in flight, every session replaying the
            turn's appends in order, every decision fenced on the session's last sequence
  push      the stored messages delivered to a durable push consumer with explicit acks
            (as the turn-runner, approval and executor consume; `durable_push`)
  pull      the same to a pull consumer fetched in batches and acked once per batch with
            AckPolicy.ALL (as the audit consumes)
  turns/s   what each rate implies at today's messages per turn (25 one-tool, 13 text)
  CPU       nats-server's CPU per message from /proc (R3: all three nodes' together)
Each phase runs a few seconds; delivery drains the backlog the append phase left (a
catch-up rate, not a live one).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import uuid_utils
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for `tests.cluster`

import scale_instances
import stack
from turns import SCRIPTS, TurnWatcher, cpu_seconds

from tests.cluster.conftest import start_cluster
from turnstream.bus import connect
from turnstream.bus.appender import AppendError, PipelinedAppender
from turnstream.bus.consume import define_pull, durable_push
from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.streams import StreamLimits
from turnstream.core.subjects import Subjects

console = Console(highlight=False)
SUBJECTS = Subjects("ts")
TEXT_TURN_MESSAGES = 13
"""A text turn's log messages today (docs/performance.md, issue 25)."""
CONDITION = "Nats-Expected-Last-Subject-Sequence"
APPEND_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Append:
    """One append of the recorded turn: a single message, or a decision's fast batch."""

    user: str
    """the service that appended it (its user on the cluster)"""
    events: tuple[tuple[str, int], ...]
    """each event's type and payload size"""
    fenced: bool
    """whether its first message carries the expected-sequence condition"""


def filler(size: int) -> bytes:
    return orjson.dumps({"pad": "x" * max(0, size - 10)})[:size].ljust(size, b" ")


async def record_turn() -> tuple[list[Append], dict[str, int]]:
    """One one-tool turn through every service; its appends as the log shows them."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        stack.workspace(root, "auto")
        script = root / "script.yaml"
        script.write_text(SCRIPTS["one-tool"])
        with (
            EmbeddedServer(root / "nats") as server,
            stack.running(server, root, script, console),
        ):
            bus = await connect(server.url, SUBJECTS, ensure=StreamLimits())
            try:
                watcher = TurnWatcher(bus)
                await watcher.start()
                await watcher.turn("shape", "hello, what is in bench.txt?")
                await asyncio.sleep(0.3)
                sub = await bus.js.subscribe(SUBJECTS.log_session("shape"), ordered_consumer=True)
                msgs = []
                with contextlib.suppress(Exception):
                    while True:
                        msgs.append(await sub.next_msg(timeout=1))
                await sub.unsubscribe()
            finally:
                await bus.close()
    appends: list[Append] = []
    header_bytes = 0
    for msg in msgs:
        user = orjson.loads(msg.data)["source"].split("/", 1)[0]
        event = (msg.subject.rsplit(".", 1)[1], len(msg.data))
        headers = msg.headers or {}
        header_bytes += sum(len(k) + len(v) + 4 for k, v in headers.items())
        fenced = CONDITION in headers
        last = appends[-1] if appends else None
        # a runner decision: from a fenced event to the next fenced one or another service
        if last and last.user == user == "turn-runner" and not fenced:
            appends[-1] = Append(user, (*last.events, event), last.fenced)
        else:
            appends.append(Append(user, (event,), fenced))
    sizes = [size for append in appends for _, size in append.events]
    return appends, {
        "messages": len(sizes),
        "payload_bytes_mean": sum(sizes) // len(sizes),
        "header_bytes_mean": header_bytes // len(sizes),
        "appends": len(appends),
    }


@dataclass
class Target:
    """A deployment to measure: how to reach it as each user, and its servers' pids."""

    name: str
    replicas: int
    url_of: Callable[[str], str]
    pids: dict[str, int]


@contextlib.asynccontextmanager
async def r1(root: Path) -> AsyncIterator[Target]:
    with EmbeddedServer(root / "r1") as server:  # as `turnstream up` starts it
        assert server.process is not None
        yield Target("R1", 1, lambda _: server.url, {"n1": server.process.pid})


@contextlib.asynccontextmanager
async def r3(root: Path) -> AsyncIterator[Target]:
    (root / "r3").mkdir()
    cluster = start_cluster(root / "r3")
    try:
        pids = {f"n{n}": process.pid for n, process in cluster.nodes.items()}
        yield Target("R3", 3, cluster.url, pids)
    finally:
        cluster.stop()


def server_cpu(target: Target) -> dict[str, float]:
    """CPU seconds each node has used so far."""
    return cpu_seconds(target.pids)


def spent(before: dict[str, float], target: Target) -> dict[str, float]:
    after = server_cpu(target)
    return {node: after[node] - before[node] for node in before}


async def append_phase(
    target: Target,
    turn: list[Append],
    seconds: float,
    instances: int,
    sessions: int,
) -> dict[str, float]:
    """`instances` times (one connection per appending service), `sessions` sessions each,
    every session replaying the turn's appends in order for `seconds`."""
    users = sorted({append.user for append in turn})
    buses = [
        {user: await connect(target.url_of(user), SUBJECTS) for user in users}
        for _ in range(instances)
    ]
    appenders = [{u: PipelinedAppender(b.nc) for u, b in group.items()} for group in buses]
    payloads = {size: filler(size) for a in turn for _, size in a.events}
    stored = 0
    turns = 0
    refused: dict[str, int] = {}
    stop = time.perf_counter() + seconds

    async def session(appender: dict[str, PipelinedAppender], name: str) -> None:
        nonlocal stored, turns
        last = 0
        while time.perf_counter() < stop:
            for append in turn:
                items = [
                    (
                        SUBJECTS.log(name, kind),
                        payloads[size],
                        {"Nats-Msg-Id": str(uuid_utils.uuid7())},
                    )
                    for kind, size in append.events
                ]
                if append.fenced:
                    items[0][2][CONDITION] = str(last)
                    items[0][2][f"{CONDITION}-Subject"] = SUBJECTS.log_session(name)
                out = appender[append.user]
                try:
                    if len(items) > 1:
                        last = await out.publish_batch(items, APPEND_TIMEOUT_S)
                    else:
                        last = (await out.publish(items, APPEND_TIMEOUT_S))[-1]
                except (AppendError, TimeoutError) as exc:  # counted; the session stops
                    key = repr(exc)
                    refused[key] = refused.get(key, 0) + 1
                    return
                stored += len(items)
            turns += 1

    cpu, started = server_cpu(target), time.perf_counter()
    async with asyncio.TaskGroup() as tasks:
        for i, appender in enumerate(appenders):
            for s in range(sessions):
                tasks.create_task(session(appender, f"{target.replicas}a{i}s{s}"))
    elapsed, cpu = time.perf_counter() - started, spent(cpu, target)
    for group in buses:
        for bus in group.values():
            await bus.close()
    return {
        **rates(stored, elapsed, cpu),
        "turns_per_s_replayed": turns / elapsed,
        "refused": refused,  # type: ignore[dict-item]
    }


async def push_phase(target: Target, seconds: float) -> dict[str, float]:
    """The backlog delivered to a durable push consumer, each message acked explicitly."""
    bus = await connect(target.url_of("turn-runner"), SUBJECTS)
    count = 0
    done = asyncio.Event()
    total = (await bus.js.stream_info(SUBJECTS.log_stream)).state.messages

    async def on_msg(msg: Any) -> None:
        nonlocal count
        await msg.ack()
        count += 1
        if count >= total:
            done.set()

    cpu, started = server_cpu(target), time.perf_counter()
    sub = await durable_push(
        bus.js,
        SUBJECTS.log_stream,
        "turn-runner",
        SUBJECTS.deliver("turn-runner"),
        [SUBJECTS.log_all],
        on_msg,
    )
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done.wait(), seconds)
    elapsed, cpu = time.perf_counter() - started, spent(cpu, target)
    await sub.unsubscribe()
    await bus.close()
    return rates(count, elapsed, cpu)


async def pull_phase(target: Target, seconds: float, batch: int = 256) -> dict[str, float]:
    """The backlog fetched by a pull consumer in batches, one AckPolicy.ALL ack per batch."""
    bus = await connect(target.url_of("audit"), SUBJECTS)
    await define_pull(bus.js, SUBJECTS.log_stream, "audit", [SUBJECTS.log_all], ack_all=True)
    sub = await bus.js.pull_subscribe_bind("audit", stream=SUBJECTS.log_stream)
    total = (await bus.js.stream_info(SUBJECTS.log_stream)).state.messages
    count = 0
    cpu, started = server_cpu(target), time.perf_counter()
    stop = started + seconds
    while count < total and time.perf_counter() < stop:
        with contextlib.suppress(TimeoutError):
            msgs = await sub.fetch(batch, timeout=0.5)
            await msgs[-1].ack()
            count += len(msgs)
    elapsed, cpu = time.perf_counter() - started, spent(cpu, target)
    await sub.unsubscribe()
    await bus.close()
    return rates(count, elapsed, cpu)


def rates(count: int, elapsed: float, cpu: dict[str, float]) -> dict[str, float]:
    """Messages/s, and the servers' CPU per message: all nodes together, and the busiest
    node's (at R3 the stream's leader: what one Raft group's leader pays per message)."""
    return {
        "messages": count,
        "messages_per_s": count / elapsed,
        "server_cpu_us_per_message": sum(cpu.values()) * 1e6 / max(count, 1),
        "busiest_node_cpu_us_per_message": max(cpu.values()) * 1e6 / max(count, 1),
    }


async def ceiling(
    target: Target, turn: list[Append], args: argparse.Namespace
) -> dict[str, dict[str, float]]:
    """Part 1: the single stream's append and delivery rates on `target`."""
    await (await connect(target.url_of("operator"), SUBJECTS, ensure=limits(target))).close()
    appended = await append_phase(target, turn, args.seconds, args.instances, args.sessions)
    return {
        "append": appended,
        "push": await push_phase(target, args.seconds),
        "pull": await pull_phase(target, args.seconds),
    }


def limits(target: Target) -> StreamLimits:
    return StreamLimits(replicas=target.replicas)  # what `turnstream streams apply` uses


async def main(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "load": os.getloadavg(),
            "python": platform.python_version(),
        },
    }
    if args.part in ("1", "both"):
        result |= await part1(args)
    if args.part in ("2", "both"):
        result["instances"] = {}  # by log partitions, one cluster each
        for count in args.log_partitions:
            with tempfile.TemporaryDirectory() as tmp:
                result["instances"][str(count)] = await scale_instances.instances(
                    Path(tmp) / f"p{count}", args, console, count
                )
        scale_instances.report(result["instances"], console)
        console.print(
            f"{args.fleet_sessions} sessions{f' at {args.rate:g} turns/s' if args.rate else ''}, "
            f"{args.fleet_seconds:g} s per n; lease TTL "
            f"{args.lease_ttl:g} s; load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
        )
    return result


async def part1(args: argparse.Namespace) -> dict[str, Any]:
    turn, shape = await record_turn()
    per_turn = shape["messages"]
    console.print(
        f"recorded one-tool turn: {per_turn} messages in {shape['appends']} appends "
        f"({', '.join(str(len(a.events)) for a in turn)}), payload mean "
        f"{shape['payload_bytes_mean']} B, headers mean {shape['header_bytes_mean']} B"
    )
    result: dict[str, Any] = {"turn": shape, "ceiling": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for make in (r1, r3):
            async with make(Path(tmp)) as target:
                result["ceiling"][target.name] = await ceiling(target, turn, args)
    table = Table(
        "log",
        "phase",
        "messages/s",
        "one-tool turns/s",
        "text turns/s",
        "server CPU µs/msg",
        "busiest node µs/msg",
    )
    for name, phases in result["ceiling"].items():
        for phase, figures in phases.items():
            rate = figures["messages_per_s"]
            table.add_row(
                name,
                phase,
                f"{rate:,.0f}",
                f"{rate / per_turn:,.0f}",
                f"{rate / TEXT_TURN_MESSAGES:,.0f}",
                f"{figures['server_cpu_us_per_message']:.1f}",
                f"{figures['busiest_node_cpu_us_per_message']:.1f}",
            )
    console.print(table)
    for name, phases in result["ceiling"].items():
        if phases["append"]["refused"]:
            console.print(f"[red]{name}: appends refused[/] {phases['append']['refused']}")
    console.print(
        f"{args.instances} × 3 appending connections, {args.sessions} sessions each; "
        f"{args.seconds:g} s per phase; load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each phase")
    parser.add_argument("--instances", type=int, default=2, help="publishers per service")
    parser.add_argument("--sessions", type=int, default=64, help="sessions per publisher")
    parser.add_argument("--json", type=Path, default=Path("bench/results/scale.json"))
    parser.add_argument("--part", choices=["1", "2", "both"], default="both")
    parser.add_argument(
        "--fleet-seconds", type=float, default=10.0, help="part 2: measured seconds per n"
    )
    parser.add_argument(
        "--fleet-sessions", type=int, default=48, help="part 2: sessions, one client each"
    )
    parser.add_argument("--warm", type=int, default=100, help="part 2: turns before each n")
    parser.add_argument(
        "--lease-ttl", type=float, default=10.0, help="part 2: TURNSTREAM_LEASE_TTL_S"
    )
    parser.add_argument(
        "--log-partitions",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[1],
        help="part 2: TURNSTREAM_LOG_PARTITIONS, or several side by side (1,4)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny numbers: a smoke run, not figures"
    )
    parser.add_argument(
        "--perf",
        type=Path,
        help="part 2: sample the nats-server nodes with `perf record` during each n into "
        "this directory (N<N>-n<n>.data), and report their top symbols per turn",
    )
    parser.add_argument(
        "--rate",
        type=float,
        help="part 2: offer this many turns/s in all (default: as fast as the clients go, "
        "one turn in flight per session); below saturation the n compare at equal work",
    )
    parser.add_argument(
        "--kills",
        type=int,
        default=1,
        help="part 2: runner kills without a restart (each followed by a new runner), for "
        "the handover's distribution; then one kill with a restart under the same id",
    )
    parser.add_argument(
        "--no-failures",
        action="store_true",
        help="part 2: only the n = 1, 2, 3 rows (no handover, leader kill, correctness)",
    )
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.sessions = 1.0, 8
        args.fleet_seconds, args.fleet_sessions, args.warm, args.lease_ttl = 3.0, 16, 16, 3.0
    out = asyncio.run(main(args))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2))
    console.print(f"wrote {args.json}")
