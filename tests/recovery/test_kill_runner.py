"""Crash recovery with real processes: kill -9 the turn-runner at chosen points of a turn,
start it again, and check the invariants from the log (exactly one terminal event, the
turn completes, each tool side effect at most once, replay equals the live state)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.recovery.harness import Witness, check_invariants, deployment, wait_for
from turnstream.client import message_command, publish_command
from turnstream.core.events import ToolInvocationSucceeded, TurnEnded

pytestmark = pytest.mark.e2e
SCRIPT = """
replies:
  - tool_calls: [{name: count_run, arguments: {file: runs.txt}}]
  - text: "done after {last_tool_result}"
    delay_ms: 300
"""


@pytest.mark.parametrize(
    "kill_after",
    [
        "ToolInvocationProposed",  # waiting for the approval
        "ToolInvocationSucceeded",  # the tool ran; the result not yet taken in
        "ProviderRequestStarted#2",  # the last model call in flight (a slow reply)
    ],
)
async def test_a_killed_runner_restarts_and_the_turn_completes_once(
    tmp_path: Path, kill_after: str
) -> None:
    session = "crash-" + kill_after.replace("#", "-").lower()
    kind, _, nth = kill_after.partition("#")
    async with deployment(tmp_path, SCRIPT) as (d, bus), Witness(bus, session) as witness:
        seen: asyncio.Queue[Any] = asyncio.Queue()
        sub = await bus.nc.subscribe(bus.subjects.log_live(session, kind), cb=seen.put)
        await publish_command(bus, session, message_command(session, "write it down"))
        for _ in range(int(nth or 1)):
            await asyncio.wait_for(seen.get(), 60)
        await sub.unsubscribe()
        d.kill9("turn_runner")
        await asyncio.sleep(0.5)  # the rest of the deployment goes on meanwhile
        d.start("turn_runner")
        [ended] = await wait_for(bus, session, "TurnEnded")
        events = await check_invariants(bus, session, witness)
        assert isinstance(ended, TurnEnded) and ended.data.status == "completed", ended
        assert "done after" in (ended.data.reply or "")
        assert len([e for e in events if isinstance(e, ToolInvocationSucceeded)]) == 1
        assert len(d.runs("runs.txt")) == 1
        assert events[-1].type == "SessionTurnEnd"
