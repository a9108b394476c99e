"""Turns per second and p50 turn latency on the 3-node cluster (R3, fsync always, the
shipped ops/nats-cluster-*.conf and ops/accounts.conf, each service as its own user)
against one node (fsync always, open), in the same run.

    python bench/cluster.py [--turns 200]

Services run in this process (one of each); turns are scripted text replies, all sent at
once; a turn's latency is from its command's ack to its TurnEnded in a subscriber.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from rich.console import Console

sys.path.insert(0, str(Path(__file__).parents[1]))

from tests.cluster.conftest import start_cluster
from turnstream.approval import app as approval
from turnstream.bus import connect
from turnstream.bus.embedded import EmbeddedServer
from turnstream.client import message_command, publish_command
from turnstream.core.subjects import Subjects
from turnstream.gateway import app as gateway
from turnstream.runtime.connection import stream_limits
from turnstream.settings import Settings
from turnstream.tool_executor import app as tool_executor
from turnstream.turn_runner import app as turn_runner

console = Console(highlight=False)
SUBJECTS = Subjects("ts")


@contextlib.asynccontextmanager
async def services(url_of: Callable[[str], str], tmp: Path, replicas: int) -> AsyncIterator[None]:
    script = tmp / "script.yaml"
    script.write_text('replies:\n  - {text: "hello"}\n')

    def settings(user: str) -> Settings:
        return Settings(  # type: ignore[call-arg]
            nats_url=url_of(user),
            data_dir=tmp,
            workspace=tmp,
            replicas=replicas,
            security_mode="auto",
            script=script,
        )

    limits = stream_limits(settings("turn-runner"))
    first = await connect(url_of("operator"), SUBJECTS, ensure=limits)  # the setup step
    await first.close()
    stop = asyncio.Event()
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(gateway.serve(settings("gateway"), stop))
        tasks.create_task(turn_runner.serve(settings("turn-runner"), stop))
        tasks.create_task(approval.serve(settings("approval"), stop))
        tasks.create_task(tool_executor.serve(settings("tool-executor"), stop))
        await asyncio.sleep(1.0)
        try:
            yield
        finally:
            stop.set()


async def run(
    url_of: Callable[[str], str], tmp: Path, replicas: int, turns: int
) -> tuple[float, float]:
    async with services(url_of, tmp, replicas):
        watcher = await connect(url_of("operator"), SUBJECTS)
        client = await connect(url_of("client"), SUBJECTS)
        acked: dict[str, float] = {}
        latency: list[float] = []
        done = asyncio.Event()

        async def on_end(msg: Any) -> None:
            session = SUBJECTS.session_from_log(msg.subject)
            if session in acked:
                latency.append(time.perf_counter() - acked.pop(session))
                if len(latency) == turns:
                    done.set()

        await watcher.nc.subscribe(SUBJECTS.log_kind_live("TurnEnded"), cb=on_end)
        prefix = f"b{replicas}x"
        started = time.perf_counter()

        async def send(i: int) -> None:
            session = f"{prefix}{i}"
            await publish_command(client, session, message_command(session, "hi"))
            acked[session] = time.perf_counter()

        await asyncio.gather(*(send(i) for i in range(turns)))
        async with asyncio.timeout(120):
            await done.wait()
        elapsed = time.perf_counter() - started
        await client.close()
        await watcher.close()
    return turns / elapsed, statistics.median(latency) * 1000


async def main(turns: int) -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with EmbeddedServer(root / "single", sync_always=True) as server:
            (root / "s").mkdir()
            rows.append(("one node (R1)", *await run(lambda _: server.url, root / "s", 1, turns)))
        (root / "cluster").mkdir()
        cluster = start_cluster(root / "cluster")
        try:
            (root / "c").mkdir()
            rows.append(("3-node cluster (R3)", *await run(cluster.url, root / "c", 3, turns)))
        finally:
            cluster.stop()
    for name, rate, p50 in rows:
        console.print(f"{name:22} {rate:7.1f} turns/s   p50 {p50:7.1f} ms   ({turns} turns)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    asyncio.run(main(parser.parse_args().turns))
