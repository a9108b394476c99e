"""Kill -9 the approval service, the tool-executor or the gateway at a chosen point of a
turn (a SIGSTOP first pins the point: the process is stopped before it can act), start it
again, and check the invariants: exactly one TurnEnded, none open, no witnessed event
lost, replay equals the live state, each tool side effect at most once."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from tests.recovery.harness import Witness, check_invariants, deployment, wait_for
from turnstream.client import answer_command, message_command, publish_command
from turnstream.core.events import InteractionRequested, ToolInvocationFailed, TurnEnded

pytestmark = pytest.mark.e2e


def script(tool: str = "count_run", seconds: float = 0) -> str:
    return f"""
replies:
  - tool_calls: [{{name: {tool}, arguments: {{file: runs.txt, seconds: {seconds}}}}}]
  - text: "done after {{last_tool_result}}"
"""


def count(log: list[object], kind: str) -> int:
    return sum(1 for e in log if getattr(e, "type", None) == kind)


async def test_approval_killed_before_it_approved_approves_once_after_restart(
    tmp_path: Path,
) -> None:
    session = "approval-auto"
    async with deployment(tmp_path, script()) as (d, bus), Witness(bus, session) as witness:
        d.signal("approval", signal.SIGSTOP)
        await publish_command(bus, session, message_command(session, "count"))
        await wait_for(bus, session, "ToolInvocationProposed")
        d.kill9("approval")
        d.start("approval")
        [ended] = await wait_for(bus, session, "TurnEnded")
        log = await check_invariants(bus, session, witness)
        assert isinstance(ended, TurnEnded) and ended.data.status == "completed"
        assert count(log, "ToolCallApproved") == 1 and len(d.runs("runs.txt")) == 1


async def test_approval_killed_with_a_prompt_open_is_answered_once_after_restart(
    tmp_path: Path,
) -> None:
    session = "approval-ask"
    async with (
        deployment(tmp_path, script(), TURNSTREAM_SECURITY_MODE="ask") as (d, bus),
        Witness(bus, session) as witness,
    ):
        await publish_command(bus, session, message_command(session, "count"))
        [asked] = await wait_for(bus, session, "InteractionRequested")
        assert isinstance(asked, InteractionRequested)
        d.kill9("approval")
        d.start("approval")
        await d.ready("approval")
        answer = answer_command(session, asked.data.interaction_id, "approve")
        await publish_command(bus, session, answer)
        [ended] = await wait_for(bus, session, "TurnEnded")
        log = await check_invariants(bus, session, witness)
        assert isinstance(ended, TurnEnded) and ended.data.status == "completed"
        assert count(log, "InteractionRequested") == 1  # not asked again
        assert count(log, "ToolCallApproved") == 1 and len(d.runs("runs.txt")) == 1


async def test_a_prompt_whose_deadline_passed_while_approval_was_down_is_denied_once(
    tmp_path: Path,
) -> None:
    session = "approval-deadline"
    env = {"TURNSTREAM_SECURITY_MODE": "ask", "TURNSTREAM_ANSWER_TIMEOUT_S": "3"}
    async with deployment(tmp_path, script(), **env) as (d, bus), Witness(bus, session) as w:
        await publish_command(bus, session, message_command(session, "count"))
        await wait_for(bus, session, "InteractionRequested")
        d.kill9("approval")
        await asyncio.sleep(4)  # the deadline passes while nobody times it
        d.start("approval")
        [ended] = await wait_for(bus, session, "TurnEnded")
        log = await check_invariants(bus, session, w)
        assert isinstance(ended, TurnEnded) and ended.data.status == "completed"
        assert count(log, "ToolCallDenied") == 1 and count(log, "ToolCallApproved") == 0
        assert d.runs("runs.txt") == []


@pytest.mark.parametrize("tool", ["count_run", "count_run_idempotent"])
async def test_executor_killed_mid_call_fails_it_interrupted_or_reruns_an_idempotent_one(
    tmp_path: Path, tool: str
) -> None:
    session = f"executor-{tool.replace('_', '-')}"
    async with (
        deployment(tmp_path, script(tool, seconds=3)) as (d, bus),
        Witness(bus, session) as witness,
    ):
        await publish_command(bus, session, message_command(session, "count slowly"))
        await wait_for(bus, session, "ToolInvocationStarted")
        d.kill9("tool_executor")  # mid-call: the file has its line, no result yet
        d.start("tool_executor")
        [ended] = await wait_for(bus, session, "TurnEnded", timeout=90)
        log = await check_invariants(bus, session, witness)
        assert isinstance(ended, TurnEnded) and ended.data.status == "completed"
        if tool == "count_run":
            [failed] = [e for e in log if isinstance(e, ToolInvocationFailed)]
            assert failed.data.error.kind == "interrupted" and failed.data.may_have_run
            assert count(log, "ToolInvocationSucceeded") == 0
            assert len(d.runs("runs.txt")) == 1  # never run again
        else:
            assert count(log, "ToolInvocationSucceeded") == 1
            assert count(log, "ToolInvocationFailed") == 0
            assert len(d.runs("runs.txt")) == 2  # ran again, as an idempotent tool may


@pytest.mark.parametrize("when", ["before-intake", "after-intake"])
async def test_gateway_killed_around_intake_accepts_the_input_exactly_once(
    tmp_path: Path, when: str
) -> None:
    session = f"gateway-{when}"
    async with deployment(tmp_path, script()) as (d, bus), Witness(bus, session) as witness:
        if when == "before-intake":
            d.signal("gateway", signal.SIGSTOP)
            await publish_command(bus, session, message_command(session, "count"))
            await asyncio.sleep(1)  # the stopped gateway's last fetch has expired
        else:
            await publish_command(bus, session, message_command(session, "count"))
            await wait_for(bus, session, "InputAccepted")  # maybe not acked yet
        d.kill9("gateway")
        d.start("gateway")
        [ended] = await wait_for(bus, session, "TurnEnded", timeout=90)
        log = await check_invariants(bus, session, witness)
        assert isinstance(ended, TurnEnded) and ended.data.status == "completed"
        assert count(log, "InputAccepted") == 1 and count(log, "SessionTurnStart") == 1
        assert len(d.runs("runs.txt")) == 1
