"""One log stream against N partition streams, side by side in one run (docs/scaling.md §2).

    python bench/partitions.py [--partitions 4] [--seconds 4] [--turns 1500]
                               [--json bench/results/partitions.json]

  ceiling     bench/scale.py's append phase (its recorded one-tool turn, replayed with its
              sizes and fast-ingest batches by `--instances` connections of each of 3 services,
              `--sessions` sessions each, every decision fenced) against `TS_LOG` and
              against `TS_LOG_0` … `TS_LOG_<N-1>` behind the account's mapping, at R1 (the
              embedded server as `turnstream up` starts it) and R3 (tests/cluster's three
              nodes, the shipped configs and ops/accounts.conf, derived for N): messages/s,
              nats-server CPU per message (all nodes; the busiest one), and how evenly the
              sessions' messages spread over the partitions
  deployment  every service as `turnstream up` runs it, on one machine, at N = 1 and N:
              bench/turns.py's K = 50 turns (`--turns`, `--script`): turns/s and CPU per
              turn of each process (the HTTP face left out, as in bench/compare.py)

Run it on an idle machine for figures; `--seconds 1 --sessions 4 --turns 50 --skip-r3` is a
smoke run.
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
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for `tests.cluster`
sys.path.insert(0, str(Path(__file__).resolve().parent))

import scale
import stack
from turns import SCRIPTS, TurnWatcher, concurrent, cpu_seconds

from tests.cluster.conftest import start_cluster
from turnstream.bus import connect
from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.streams import StreamLimits
from turnstream.cli.up import Supervisor
from turnstream.core.subjects import Subjects
from turnstream.settings import Settings

console = Console(highlight=False)


@contextlib.asynccontextmanager
async def r1(root: Path, subjects: Subjects) -> AsyncIterator[scale.Target]:
    with EmbeddedServer(root / f"r1-{subjects.log_partitions}", subjects=subjects) as server:
        assert server.process is not None
        yield scale.Target("R1", 1, lambda _: server.url, {"n1": server.process.pid})


@contextlib.asynccontextmanager
async def r3(root: Path, subjects: Subjects) -> AsyncIterator[scale.Target]:
    folder = root / f"r3-{subjects.log_partitions}"
    folder.mkdir()
    cluster = start_cluster(folder, subjects)
    try:
        pids = {f"n{n}": process.pid for n, process in cluster.nodes.items()}
        yield scale.Target("R3", 3, cluster.url, pids)
    finally:
        cluster.stop()


async def spread(target: scale.Target, subjects: Subjects) -> list[int]:
    """Messages each log stream holds."""
    bus = await connect(target.url_of("operator"), subjects)
    try:
        infos = [await bus.js.stream_info(stream) for stream in subjects.log_streams]
    finally:
        await bus.close()
    return [int(info.state.messages) for info in infos]


async def ceiling(
    target: scale.Target, subjects: Subjects, turn: list[scale.Append], args: argparse.Namespace
) -> dict[str, Any]:
    limits = StreamLimits(replicas=target.replicas)  # as `turnstream streams apply`
    await (await connect(target.url_of("operator"), subjects, ensure=limits)).close()
    # the appenders publish today's subjects; the server's mapping partitions them
    appended = await scale.append_phase(target, turn, args.seconds, args.instances, args.sessions)
    return {**appended, "per_partition": await spread(target, subjects)}


async def ceilings(args: argparse.Namespace) -> dict[str, Any]:
    turn, shape = await scale.record_turn()
    out: dict[str, Any] = {"turn": shape, "runs": {}}
    targets = (r1,) if args.skip_r3 else (r1, r3)
    with tempfile.TemporaryDirectory() as tmp:
        for make in targets:
            for n in (1, args.partitions):
                subjects = Subjects("ts", n)
                async with make(Path(tmp), subjects) as target:
                    figures = await ceiling(target, subjects, turn, args)
                    out["runs"][f"{target.name} N={n}"] = figures
    return out


@contextlib.contextmanager
def deployment(root: Path, n: int, script_name: str) -> Iterator[tuple[str, dict[str, int]]]:
    """Every service but the HTTP face, as `turnstream up` starts them, the log in `n`
    streams."""
    stack.workspace(root, "auto")
    script = root / "script.yaml"
    script.write_text(SCRIPTS[script_name])
    subjects = Subjects("ts", n)
    with EmbeddedServer(root / "nats", subjects=subjects) as server:
        asyncio.run(ensure(server.url, subjects))
        settings = Settings(data_dir=root, script=script, log_partitions=n)
        supervisor = Supervisor(server.url, settings, console)
        supervisor.services = [s for s in supervisor.services if s != "http"]
        supervisor.start_all()
        try:
            time.sleep(stack.STARTUP_S)
            yield server.url, stack.pids(supervisor, server)
        finally:
            supervisor.stop_all()


async def ensure(url: str, subjects: Subjects) -> None:
    await (await connect(url, subjects, ensure=StreamLimits())).close()


async def measure(url: str, n: int, pids: dict[str, int], turns: int) -> dict[str, Any]:
    bus = await connect(url, Subjects("ts", n))
    watcher = TurnWatcher(bus)
    await watcher.start()
    try:
        await concurrent(watcher, 10, max(20, turns // 10), "warm")
        before = cpu_seconds(pids)
        k50 = await concurrent(watcher, 50, turns, "k50")
        after = cpu_seconds(pids)
    finally:
        await bus.close()
    cpu = {p: (after[p] - before[p]) * 1000 / k50["turns"] for p in pids}
    return {"turns_per_s": k50["turns_per_s"], "p50_ms": k50["p50_ms"], "cpu_ms_per_turn": cpu}


def deployments(args: argparse.Namespace) -> dict[str, Any]:
    out = {}
    for n in (1, args.partitions):
        with (
            tempfile.TemporaryDirectory() as tmp,
            deployment(Path(tmp), n, args.script) as (url, pids),
        ):
            out[f"N={n}"] = asyncio.run(measure(url, n, pids, args.turns))
    return out


def print_ceilings(result: dict[str, Any]) -> None:
    per_turn = result["turn"]["messages"]
    table = Table("log", "messages/s", "one-tool turns/s", "server µs/msg", "busiest node µs/msg",
                  "messages per partition (min-max)")  # fmt: skip
    for name, f in result["runs"].items():
        parts = f["per_partition"]
        table.add_row(
            name,
            f"{f['messages_per_s']:,.0f}",
            f"{f['messages_per_s'] / per_turn:,.0f}",
            f"{f['server_cpu_us_per_message']:.1f}",
            f"{f['busiest_node_cpu_us_per_message']:.1f}",
            f"{min(parts):,}-{max(parts):,} of {sum(parts):,}",
        )
        if f["refused"]:
            console.print(f"[red]{name}: appends refused[/] {f['refused']}")
    console.print(table)


def print_deployments(result: dict[str, Any]) -> None:
    names = sorted({p for f in result.values() for p in f["cpu_ms_per_turn"]})
    table = Table("log", "turns/s", "p50 ms", *(f"{p} ms/turn" for p in names), "total ms/turn")
    for name, f in result.items():
        cpu = f["cpu_ms_per_turn"]
        table.add_row(
            name,
            f"{f['turns_per_s']:,.0f}",
            f"{f['p50_ms']:.1f}",
            *(f"{cpu.get(p, 0):.2f}" for p in names),
            f"{sum(cpu.values()):.2f}",
        )
    console.print(table)


def main(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "load": os.getloadavg(),
            "python": platform.python_version(),
        },
        "args": {k: str(v) for k, v in vars(args).items()},
    }
    if not args.skip_ceiling:
        result["ceiling"] = asyncio.run(ceilings(args))
        print_ceilings(result["ceiling"])
    if not args.skip_deployment:
        result["deployment"] = deployments(args)
        print_deployments(result["deployment"])
    console.print(
        f"N = 1 against {args.partitions}; load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    return result


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--partitions", type=int, default=4, help="N to set against 1")
    parser.add_argument("--seconds", type=float, default=4.0, help="length of an append phase")
    parser.add_argument("--instances", type=int, default=2, help="publishers per service")
    parser.add_argument("--sessions", type=int, default=64, help="sessions per publisher")
    parser.add_argument("--turns", type=int, default=1500, help="K = 50 turns per deployment")
    parser.add_argument("--script", default="one-tool", choices=sorted(SCRIPTS))
    parser.add_argument("--skip-r3", action="store_true", help="the ceiling at R1 only")
    parser.add_argument("--skip-ceiling", action="store_true")
    parser.add_argument("--skip-deployment", action="store_true")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    return parser.parse_args()


if __name__ == "__main__":
    args = arguments()
    out = main(args)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2))
        console.print(f"wrote {args.json}")
