"""Two turn-runner processes on one deployment: each session is acted for by one of them at
a time (leases); a runner paused past its lease (SIGSTOP) or killed is taken over."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from tests.recovery.harness import Witness, check_invariants, deployment, wait_for
from turnstream.client import message_command, publish_command
from turnstream.core.events import TurnEnded

pytestmark = pytest.mark.e2e
SCRIPT = """
replies:
  - tool_calls: [{name: count_run, arguments: {file: runs.txt}}]
  - text: "done after {last_tool_result}"
"""
SLOW = """
replies:
  - text: "slow reply"
    delay_ms: 2500
    chunks: whole
"""


async def test_two_runners_share_sessions_and_every_turn_ends_once(tmp_path: Path) -> None:
    sessions = [f"shared-{i}" for i in range(12)]
    async with deployment(tmp_path, SCRIPT) as (d, bus):
        d.start("turn_runner", as_name="turn_runner_b")
        await d.ready("turn_runner_b")
        for round_ in range(2):
            for s in sessions:
                await publish_command(bus, s, message_command(s, f"{s}-{round_}"))
            for s in sessions:
                await wait_for(bus, s, "TurnEnded", count=round_ + 1)
        sources, invocations = set(), []
        for s in sessions:
            log = await check_invariants(bus, s)
            ended = [e for e in log if isinstance(e, TurnEnded)]
            assert [e.data.status for e in ended] == ["completed", "completed"]
            invocations += [e.data.invocation_id for e in log if e.type == "ToolInvocationStarted"]
            sources |= {e.source for e in log if e.source.startswith("turn-runner/")}
        assert sorted(d.runs("runs.txt")) == sorted(invocations) and len(invocations) == 24
        assert len(sources) == 2, sources  # both runners took part


async def test_a_runner_paused_past_its_lease_is_taken_over_and_then_keeps_out(
    tmp_path: Path,
) -> None:
    session = "paused"
    async with (
        deployment(tmp_path, SLOW) as (d, bus),
        Witness(bus, session) as witness,
    ):
        await publish_command(bus, session, message_command(session, "take your time"))
        [started] = await wait_for(bus, session, "ProviderRequestStarted")
        d.signal("turn_runner", signal.SIGSTOP)  # paused mid model call, holding the lease
        d.start("turn_runner", as_name="turn_runner_b")
        [ended] = await wait_for(bus, session, "TurnEnded")
        d.signal("turn_runner", signal.SIGCONT)  # its model call returns; the lease is gone
        await asyncio.sleep(4)  # its slow reply (2.5 s) is in by now, and refused
        log = await check_invariants(bus, session, witness)
        assert isinstance(ended, TurnEnded) and ended.data.status == "completed"
        paused_source = started.source
        assert ended.source != paused_source
        after_takeover = log[log.index(started) + 1 :]
        assert all(e.source != paused_source for e in after_takeover), [
            (e.type, e.source) for e in after_takeover
        ]


async def test_the_sessions_of_a_killed_runner_are_taken_over_by_the_other(
    tmp_path: Path,
) -> None:
    sessions = [f"orphan-{i}" for i in range(4)]
    async with deployment(tmp_path, SLOW) as (d, bus):
        for s in sessions:
            await publish_command(bus, s, message_command(s, "hello"))
        for s in sessions:
            await wait_for(bus, s, "ProviderRequestStarted")
        d.start("turn_runner", as_name="turn_runner_b")  # holds none of them
        d.kill9("turn_runner")
        for s in sessions:
            [ended] = await wait_for(bus, s, "TurnEnded")
            assert isinstance(ended, TurnEnded) and ended.data.status == "completed"
            await check_invariants(bus, s)
