"""Stop nats-server for 20 s with tool calls in flight, start it again on the same port and
store (issue 19, item 2): every service stays up, and every turn ends with its tool's real
result (a result computed while the broker was away is kept and appended once it is back,
not lost to an `interrupted, mayHaveRun`)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.recovery.harness import deployment, events
from tests.recovery.test_many_open_sessions import counts, until
from turnstream.client import message_command, publish_command
from turnstream.core.events import ToolInvocationFailed, ToolInvocationSucceeded, TurnEnded

pytestmark = pytest.mark.e2e
TURNS = int(os.environ.get("TS_TEST_OUTAGE_TURNS", "60"))
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
