"""A partitioned log (four streams) with real service processes: the turn-runner killed
with SIGKILL while turns in every partition are under way, started again; every turn ends
exactly once, each tool side effect at most once, replay equals the live state."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

from tests.recovery.harness import Witness, check_invariants, deployment, wait_for
from turnstream.client import message_command, publish_command
from turnstream.core.events import TurnEnded

pytestmark = pytest.mark.e2e
SCRIPT = """
replies:
  - tool_calls: [{name: count_run, arguments: {file: runs.txt}}]
  - text: "done after {last_tool_result}"
    delay_ms: 300
"""
N = 4
PER_PARTITION = 2


async def test_a_killed_runner_ends_every_turn_of_every_partition_once(tmp_path: Path) -> None:
    async with (
        deployment(tmp_path, SCRIPT, log_partitions=N) as (d, bus),
        contextlib.AsyncExitStack() as stack,
    ):
        subjects = bus.subjects
        sessions: list[str] = []
        i = 0
        while len(sessions) < N * PER_PARTITION:  # two sessions in each partition
            candidate = f"pkill-{i}"
            i += 1
            k = subjects.partition_of(candidate)
            if sum(subjects.partition_of(s) == k for s in sessions) < PER_PARTITION:
                sessions.append(candidate)
        witnesses = [await stack.enter_async_context(Witness(bus, s)) for s in sessions]
        proposed: asyncio.Queue[Any] = asyncio.Queue()
        sub = await bus.nc.subscribe(
            subjects.log_kind_live("ToolInvocationProposed"), cb=proposed.put
        )
        for session in sessions:
            await publish_command(bus, session, message_command(session, "write it down"))
        for _ in range(N):  # mid-turns: some have proposed their call, others not yet
            await asyncio.wait_for(proposed.get(), 60)
        await sub.unsubscribe()
        d.kill9("turn_runner")
        await asyncio.sleep(0.5)
        d.start("turn_runner")
        for session, witness in zip(sessions, witnesses, strict=True):
            [ended] = await wait_for(bus, session, "TurnEnded", timeout=90)
            assert isinstance(ended, TurnEnded) and ended.data.status == "completed", ended
            events = await check_invariants(bus, session, witness)
            assert sum(e.type == "TurnEnded" for e in events) == 1
        assert len(d.runs("runs.txt")) == len(sessions)  # each call ran once
