"""Restart nats-server on the same store mid-turn (stopped cleanly, or killed -9): every
service reconnects, and the turn continues or ends `failed, recovered` — one terminal
event, none open, nothing acked lost, each side effect at most once."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from tests.recovery.harness import check_invariants, deployment, wait_for
from turnstream.client import message_command, publish_command
from turnstream.core.events import TurnEnded

pytestmark = pytest.mark.e2e
SCRIPT = """
replies:
  - tool_calls: [{name: count_run, arguments: {file: runs.txt, seconds: 0}}]
    delay_ms: 1500
  - text: "done after {last_tool_result}"
    delay_ms: 1500
    chunks: whole
"""


@pytest.mark.parametrize("how", ["term", "kill"])
@pytest.mark.parametrize("during", ["ProviderRequestStarted", "ToolInvocationProposed"])
async def test_the_turn_survives_a_server_restart(tmp_path: Path, how: str, during: str) -> None:
    session = f"restart-{how}-{during.lower()}"
    async with deployment(tmp_path, SCRIPT) as (d, bus):
        await publish_command(bus, session, message_command(session, "count"))
        before = await wait_for(bus, session, during)
        acked = [s.event.id for s in await bus.store.read_session(session)]
        server = d.server
        assert server.process is not None
        if how == "kill":
            server.process.send_signal(signal.SIGKILL)
            server.process.wait()
        else:
            server.stop()
        await asyncio.sleep(1)
        server.start()
        [ended] = await wait_for(bus, session, "TurnEnded", timeout=90)
        log = await check_invariants(bus, session)
        assert before and not set(acked) - {e.id for e in log}, "an acked event was lost"
        assert isinstance(ended, TurnEnded)
        assert ended.data.status == "completed" or ended.data.failure_class == "recovered"
        assert len(d.runs("runs.txt")) <= 1
