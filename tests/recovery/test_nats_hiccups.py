"""NATS slow or away on a service's start and a runner's resume (issue 36): every service,
its HTTP face included, runs behind a proxy (`nats_proxy.py`) that refuses connections,
drops JetStream API replies, delays everything past a request's timeout while turns are in
flight and cuts every connection, and none of them exits; every turn still ends exactly
once, each tool run once.

Before, a JetStream request that timed out there ended the service: `consumer_info` in
binding a durable (`bus.durables.bound_config`) or in the runner's resume
(`turn_runner.ownership.wake_unacked`) raised `nats.errors.TimeoutError` out of its task
group, and the process exited.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from tests.recovery.harness import SERVICES, Deployment, events, until_serving
from tests.recovery.nats_proxy import NatsProxy
from turnstream.bus import Bus, connect
from turnstream.bus.embedded import EmbeddedServer, free_port
from turnstream.bus.scan import subject_counts
from turnstream.bus.streams import StreamLimits
from turnstream.client import message_command, publish_command
from turnstream.core.events import ToolInvocationSucceeded, TurnEnded
from turnstream.core.subjects import Subjects

pytestmark = pytest.mark.e2e
TURNS = 12
STALL_S = 12.0
"""How long replies are dropped: more than two of a request's 5 s timeouts."""
ALL_SERVICES = (*SERVICES, "audit", "http")
SCRIPT = """
replies:
  - tool_calls: [{name: count_run, arguments: {file: runs.txt, seconds: 3}}]
  - text: "done after {last_tool_result}"
    chunks: whole
"""


def exited(d: Deployment) -> dict[str, int | None]:
    return {name: proc.poll() for name, proc in d.procs.items() if proc.poll() is not None}


async def until(bus: Bus, kind: str, n: int, timeout: float) -> None:
    """Until `n` sessions have an event of `kind`, in whichever partition of the log."""
    subjects = bus.subjects
    async with asyncio.timeout(timeout):
        while True:
            found = 0
            for stream in subjects.log_streams:
                found += len(await subject_counts(bus.nc, stream, subjects.log_kind(kind)))
            if found >= n:
                return
            await asyncio.sleep(0.5)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("log_partitions", [1, 2])
async def test_no_service_exits_when_nats_hiccups_at_start_and_at_resume(
    tmp_path: Path, log_partitions: int
) -> None:
    """With the log in one stream (a lease per session) and in two partitions (a runner
    holds whole partitions, `PartitionSessions`)."""
    subjects = Subjects("ts", log_partitions)
    server = EmbeddedServer(
        tmp_path / "nats", log_file=tmp_path / "nats-server.log", subjects=subjects
    ).start()
    proxy = NatsProxy("127.0.0.1", server.port).start()
    bus = await connect(server.url, subjects, ensure=StreamLimits())  # the setup step, direct
    http_addr = f"127.0.0.1:{free_port()}"
    d = Deployment(tmp_path, server, SCRIPT, TURNSTREAM_NATS_URL=proxy.url)
    try:
        # start: NATS away until every service has tried it twice, then no reply to a
        # look at a stream for 6 s (the check that the setup step ran), then none to a
        # consumer's info or creation (binding a durable, starting a KV watch or a scan of
        # the log) for STALL_S
        proxy.refusing = True
        for name in ALL_SERVICES:
            d.start(name, TURNSTREAM_HTTP_ADDR=http_addr)

        def all_tried() -> bool:
            return proxy.refused >= 2 * len(ALL_SERVICES) and all(map(d.said, ALL_SERVICES))

        async with asyncio.timeout(60):  # importing takes them a while on a busy machine
            while not all_tried():  # noqa: ASYNC110 (other processes' doing)
                await asyncio.sleep(0.1)
        await asyncio.sleep(1)
        proxy.drop_replies("$JS.API.STREAM.INFO.")
        proxy.refusing = False
        await asyncio.sleep(6)
        proxy.drop_replies("$JS.API.CONSUMER.")
        await asyncio.sleep(STALL_S)
        proxy.drop_replies()
        assert proxy.dropped, "no reply was dropped: the services asked nothing meanwhile"
        assert not exited(d), f"a service exited at start: {exited(d)}"
        await until_serving(bus, d)
        await d.ready("audit", "audit partition 0 consuming")
        await d.ready("http", "turnstream http on")

        sessions = [f"hiccup-{i}" for i in range(TURNS)]
        await asyncio.gather(*(publish_command(bus, s, message_command(s, "go")) for s in sessions))
        # turns in flight: everything the server sends comes 6 s late (past a request's
        # 5 s timeout) for 10 s
        proxy.delay_s = 6.0
        await asyncio.sleep(10)
        proxy.delay_s = 0.0
        assert not exited(d), f"a service exited while NATS was slow: {exited(d)}"
        await until(bus, "ToolInvocationStarted", TURNS, timeout=60)

        # resume: the runner killed with its tools running and started again while no
        # consumer info is answered (its durable bound, its facts not acked looked for),
        # and every connection cut meanwhile
        d.kill9("turn_runner")
        dropped = proxy.dropped
        proxy.drop_replies("$JS.API.CONSUMER.INFO.")
        d.start("turn_runner")
        await asyncio.sleep(STALL_S / 2)
        proxy.cut()
        await asyncio.sleep(STALL_S / 2)
        proxy.drop_replies()
        assert proxy.dropped > dropped, "the restarted runner asked nothing meanwhile"
        assert not exited(d), f"a service exited at the runner's resume: {exited(d)}"

        await until(bus, "TurnEnded", TURNS, timeout=150)
        await asyncio.sleep(2)  # anything late (a second end) would be in the log now
        for session in sessions:
            log = await events(bus, session)
            ended = [e for e in log if isinstance(e, TurnEnded)]
            assert len(ended) == 1 and ended[0].data.status == "completed", (session, ended)
            assert len([e for e in log if isinstance(e, ToolInvocationSucceeded)]) == 1
        assert len(d.runs("runs.txt")) == TURNS  # each tool ran once
        assert not exited(d), f"a service exited: {exited(d)}"
        runner_log = (tmp_path / "turn_runner.log").read_text()
        assert "asking again" in runner_log  # it waited for NATS, and said so
    finally:
        d.stop_all()
        proxy.stop()
        await bus.close()
        server.stop()


@pytest.mark.timeout(180)
async def test_a_service_told_to_stop_while_nats_does_not_answer_stops(tmp_path: Path) -> None:
    """A wait for NATS ends at a SIGTERM: each service, asked to stop while no consumer's
    info or creation is answered (its durable not bound yet), stops within seconds, cleanly."""
    subjects = Subjects("ts")
    server = EmbeddedServer(tmp_path / "nats", log_file=tmp_path / "nats-server.log").start()
    proxy = NatsProxy("127.0.0.1", server.port).start()
    bus = await connect(server.url, subjects, ensure=StreamLimits())
    http_addr = f"127.0.0.1:{free_port()}"
    d = Deployment(tmp_path, server, SCRIPT, TURNSTREAM_NATS_URL=proxy.url)
    try:
        proxy.drop_replies("$JS.API.CONSUMER.")
        for name in ALL_SERVICES:
            d.start(name, TURNSTREAM_HTTP_ADDR=http_addr)
        for name in ALL_SERVICES:
            marker = "watch failed" if name == "http" else "not answered"
            await d.ready(name, marker, timeout=90)
        assert not exited(d), f"a service exited: {exited(d)}"
        for name in ALL_SERVICES:
            d.signal(name, signal.SIGTERM)
        async with asyncio.timeout(20):
            while len(exited(d)) < len(ALL_SERVICES):  # noqa: ASYNC110 (processes)
                await asyncio.sleep(0.1)
        assert exited(d) == dict.fromkeys(ALL_SERVICES, 0)
        for name in ALL_SERVICES:
            assert "Traceback" not in (tmp_path / f"{name}.log").read_text(), name
    finally:
        d.stop_all()
        proxy.stop()
        await bus.close()
        server.stop()
