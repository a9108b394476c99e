"""Stop nats-server for 20 s with tool calls in flight, start it again on the same port and
store (issue 19, item 2): every service stays up, and every turn ends with its tool's real
result (a result computed while the broker was away is kept and appended once it is back,
not lost to an `interrupted, mayHaveRun`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_tools_path import registry
from tests.recovery.harness import deployment, events
from tests.recovery.test_many_open_sessions import counts, until
from tests.unit.factories import tool_requested
from turnstream.bus import Bus, connect
from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.streams import StreamLimits
from turnstream.client import message_command, publish_command
from turnstream.core.events import (
    ToolInvocationFailed,
    ToolInvocationSucceeded,
    TurnEnded,
)
from turnstream.core.subjects import Subjects
from turnstream.settings import Settings
from turnstream.tool_executor import app as tool_executor

pytestmark = pytest.mark.e2e
TURNS = int(os.environ.get("TS_TEST_OUTAGE_TURNS", "100"))
OUTAGE_S = 20
SCRIPT = """
replies:
  - tool_calls: [{name: count_run, arguments: {file: runs.txt, seconds: 8}}]
  - text: "done after {last_tool_result}"
    chunks: whole
"""


@pytest.mark.timeout(240)
async def test_services_outlive_a_broker_outage_and_keep_tool_results(tmp_path: Path) -> None:
    sessions = [f"outage-{i}" for i in range(TURNS)]
    async with deployment(tmp_path, SCRIPT, TURNSTREAM_TOOL_CONCURRENCY="256") as (d, bus):
        await asyncio.gather(*(publish_command(bus, s, message_command(s, "go")) for s in sessions))
        await until(bus, "ToolInvocationStarted", TURNS, timeout=60)
        done_before = len(await counts(bus, "ToolInvocationSucceeded"))
        assert done_before < TURNS // 2, "most tools ended before the outage: slow them down"
        d.server.stop()  # the tools finish while the broker is away
        await asyncio.sleep(OUTAGE_S)
        alive = {name: proc.poll() for name, proc in d.procs.items()}
        d.server.start()
        assert all(code is None for code in alive.values()), f"a service exited: {alive}"
        await until(bus, "TurnEnded", TURNS, timeout=120)
        await asyncio.sleep(2)
        for session in sessions:
            log = await events(bus, session)
            ended = [e for e in log if isinstance(e, TurnEnded)]
            assert len(ended) == 1 and ended[0].data.status == "completed", (session, ended)
            assert "done after counted in runs.txt" in (ended[0].data.reply or ""), ended
            assert len([e for e in log if isinstance(e, ToolInvocationSucceeded)]) == 1
            assert not [e for e in log if isinstance(e, ToolInvocationFailed)], session
        assert len(d.runs("runs.txt")) == TURNS  # each tool ran once
        assert all(proc.poll() is None for proc in d.procs.values())


@contextlib.asynccontextmanager
async def one_executor(tmp_path: Path) -> AsyncIterator[tuple[EmbeddedServer, Bus, asyncio.Event]]:
    """A server, a connection to it, and a tool-executor (in this process) told to stop
    by the event."""
    (tmp_path / "workspace").mkdir()
    server = EmbeddedServer(tmp_path / "nats", log_file=tmp_path / "nats-server.log").start()
    try:
        bus = await connect(server.url, Subjects("ts"), ensure=StreamLimits())
        settings = Settings(  # auto: the bare requests below are justified by the mode
            nats_url=server.url,
            data_dir=tmp_path,
            workspace=tmp_path / "workspace",
            security_mode="auto",
        )
        stop = asyncio.Event()
        executor = asyncio.create_task(tool_executor.serve(settings, stop, tools=registry()))
        await asyncio.sleep(0.5)
        try:
            yield server, bus, stop
        finally:
            stop.set()
            async with asyncio.timeout(10):
                await asyncio.wait([executor])
            await bus.close()
        assert executor.exception() is None
    finally:
        server.stop()


async def started_one(bus: Bus, session: str, ms: int) -> None:
    """Request a call of `slow_read` sleeping `ms`, and wait until it has started."""
    started: asyncio.Queue[Any] = asyncio.Queue()
    sub = await bus.nc.subscribe(
        bus.subjects.log_live(session, "ToolInvocationStarted"), cb=started.put
    )
    await bus.store.append_facts([tool_requested(session, "slow_read", ms=ms)])
    await asyncio.wait_for(started.get(), 10)
    await sub.unsubscribe()


@pytest.mark.timeout(60)
async def test_an_executor_stopped_while_the_broker_is_away_stops_cleanly(
    tmp_path: Path,
) -> None:
    """The tool finishes while the broker is away and its result waits; the executor is
    stopped then: it stops (the claim stays `running` for the next executor), and closes
    its connection without the drain a reconnecting connection refuses."""
    async with one_executor(tmp_path) as (server, bus, stop):
        await started_one(bus, "away", ms=500)
        server.stop()  # the tool finishes now, and its result cannot be appended
        await asyncio.sleep(2)
        stop.set()


@pytest.mark.timeout(60)
async def test_a_shutdown_gives_a_result_still_being_kept_a_bounded_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Marking a claim `done` is retried until the broker takes it, but a shutdown waits
    for it `SHUTDOWN_GRACE_S` only. The invocations bucket is deleted under the running
    call, so the mark is refused every time."""
    monkeypatch.setattr(tool_executor, "SHUTDOWN_GRACE_S", 1.0)
    async with one_executor(tmp_path) as (_server, bus, stop):
        await started_one(bus, "no-bucket", ms=800)
        await bus.js.delete_key_value(bus.subjects.invocations_bucket)
        for _ in range(50):  # the result is appended; the claim cannot be marked done
            if only_succeeded := [
                s
                for s in await bus.store.read_session("no-bucket")
                if isinstance(s.event, ToolInvocationSucceeded)
            ]:
                break
            await asyncio.sleep(0.1)
        assert only_succeeded
        await asyncio.sleep(1)
        stop.set()
