"""Two approval processes on one deployment: a session's prompts are decided by the holder
of its approval lease; a holder killed with SIGKILL is taken over, its prompts rebuilt from
the log, each answered once and no verdict doubled."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from pathlib import Path

import pytest

from tests.recovery.harness import Deployment, check_invariants, deployment, wait_for
from turnstream.bus import Bus
from turnstream.client import answer_command, message_command, pending_prompts, publish_command
from turnstream.core.events import Event, InteractionRequested, TurnEnded
from turnstream.core.subjects import session_key

pytestmark = pytest.mark.e2e
LEASE_TTL_S = 2.0  # the harness's FAST_LEASES
ONE_CALL = """
replies:
  - tool_calls: [{name: count_run, arguments: {file: runs.txt}}]
  - text: "done after {last_tool_result}"
"""
TWO_CALLS = """
replies:
  - tool_calls:
      - {name: count_run, arguments: {file: runs.txt}}
      - {name: count_run, arguments: {file: runs.txt}}
  - text: "done after {last_tool_result}"
"""


async def holder(bus: Bus, session: str) -> str | None:
    """The owner written in the session's approval lease (None: free)."""
    kv = await bus.js.key_value(bus.subjects.leases_bucket)
    try:
        entry = await kv.get(f"approval.{session_key(session)}")
    except Exception:
        return None
    return entry.value.decode() if entry.value else None


def pid_of(owner: str | None, d: Deployment, names: tuple[str, ...]) -> str | None:
    """Which of the processes `names` wrote `owner` (its source carries its pid)."""
    return next((n for n in names if owner and f"-{d.pid(n)}/" in owner), None)


def per_invocation(log: list[Event], kind: str) -> Counter[str]:
    return Counter(getattr(e.data, "invocation_id", "") for e in log if e.type == kind)


async def prompts_on_both(d: Deployment, bus: Bus, names: tuple[str, str]) -> list[str]:
    """Sessions with a prompt open, sent in waves until each instance holds some (the
    deliver group hands each first delivery to either)."""
    sessions: list[str] = []
    for wave in range(6):
        batch = [f"ask-{wave}-{i}" for i in range(4)]
        for s in batch:
            await publish_command(bus, s, message_command(s, "count"))
        for s in batch:
            await wait_for(bus, s, "InteractionRequested")
        sessions += batch
        holders = {pid_of(await holder(bus, s), d, names) for s in sessions}
        if set(names) <= holders:
            return sessions
    raise AssertionError(f"one instance took every session: {holders}")


async def test_a_killed_approval_instance_s_prompts_survive_and_are_answered_once(
    tmp_path: Path,
) -> None:
    names = ("approval", "approval_b")
    async with deployment(tmp_path, ONE_CALL, TURNSTREAM_SECURITY_MODE="ask") as (d, bus):
        d.start("approval", as_name="approval_b")
        await d.ready("approval_b")
        sessions = await prompts_on_both(d, bus, names)
        asked: dict[str, InteractionRequested] = {}
        for s in sessions:
            [event] = await wait_for(bus, s, "InteractionRequested")
            assert isinstance(event, InteractionRequested)
            asked[event.data.interaction_id] = event
        listed = {p["interactionId"] for p in await pending_prompts(bus)}
        assert listed == set(asked)  # gathered from both instances
        d.kill9("approval")
        # the survivor takes the dead one's sessions once their leases expire, rebuilds
        # their prompts from the log and lists them again
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LEASE_TTL_S + 4
        while (listed := {p["interactionId"] for p in await pending_prompts(bus)}) != set(asked):
            assert loop.time() < deadline, f"prompts lost: {set(asked) - listed}"
            await asyncio.sleep(0.2)
        for interaction_id, event in asked.items():
            await publish_command(
                bus, event.session_id, answer_command(event.session_id, interaction_id, "approve")
            )
        invocations = []
        for s in sessions:
            [ended] = await wait_for(bus, s, "TurnEnded")
            assert isinstance(ended, TurnEnded) and ended.data.status == "completed"
            log = await check_invariants(bus, s)
            assert set(per_invocation(log, "InteractionRequested").values()) == {1}
            approved = per_invocation(log, "ToolCallApproved")
            assert set(approved.values()) == {1} and not per_invocation(log, "ToolCallDenied")
            invocations += list(approved)
            assert pid_of(await holder(bus, s), d, names) != "approval"
        assert sorted(d.runs("runs.txt")) == sorted(invocations)
        assert len(invocations) == len(sessions)
        assert await pending_prompts(bus) == []


async def test_two_approval_instances_ask_every_prompt_exactly_once(tmp_path: Path) -> None:
    sessions = [f"both-{i}" for i in range(16)]
    async with deployment(tmp_path, TWO_CALLS, TURNSTREAM_SECURITY_MODE="ask") as (d, bus):
        d.start("approval", as_name="approval_b")
        await d.ready("approval_b")
        for s in sessions:
            await publish_command(bus, s, message_command(s, "count twice"))
        answered: set[str] = set()
        async with asyncio.timeout(90):
            while len(answered) < 2 * len(sessions):
                for prompt in await pending_prompts(bus):
                    if prompt["interactionId"] in answered:
                        continue
                    answer = answer_command(prompt["sessionId"], prompt["interactionId"], "approve")
                    await publish_command(bus, prompt["sessionId"], answer)
                    answered.add(prompt["interactionId"])
                await asyncio.sleep(0.1)
        sources = set()
        for s in sessions:
            [ended] = await wait_for(bus, s, "TurnEnded")
            assert isinstance(ended, TurnEnded) and ended.data.status == "completed"
            log = await check_invariants(bus, s)
            requested = per_invocation(log, "InteractionRequested")
            assert len(requested) == 2 and set(requested.values()) == {1}, requested
            assert set(per_invocation(log, "ToolCallApproved").values()) == {1}
            sources |= {e.source for e in log if e.type == "InteractionRequested"}
        assert len(d.runs("runs.txt")) == 2 * len(sessions)
        assert len(sources) == 2, sources  # both instances asked


async def test_a_turn_ended_elsewhere_closes_the_holder_s_prompt(tmp_path: Path) -> None:
    """A hard interrupt ends each turn while its prompt is open: the TurnEnded reaches the
    instance holding the prompt, whichever instance the deliver group gave it to, and no
    instance lists the prompt any more (it would wait for its 300 s deadline otherwise)."""
    sessions = [f"ended-{i}" for i in range(8)]
    async with deployment(tmp_path, ONE_CALL, TURNSTREAM_SECURITY_MODE="ask") as (d, bus):
        d.start("approval", as_name="approval_b")
        await d.ready("approval_b")
        for s in sessions:
            await publish_command(bus, s, message_command(s, "count"))
        for s in sessions:
            await wait_for(bus, s, "InteractionRequested")
        assert len(await pending_prompts(bus)) == len(sessions)
        for s in sessions:
            interrupt = {
                "type": "interrupt",
                "sessionId": s,
                "chatId": s,
                "sender": {"kind": "human", "id": "test"},
                "idempotencyKey": f"interrupt-{s}",
                "mode": "hard",
            }
            await publish_command(bus, s, interrupt)
        for s in sessions:
            [ended] = await wait_for(bus, s, "TurnEnded")
            assert isinstance(ended, TurnEnded) and ended.data.status == "failed"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        while listed := await pending_prompts(bus):
            assert loop.time() < deadline, f"prompts of ended turns still listed: {listed}"
            await asyncio.sleep(0.2)
        for s in sessions:
            log = await check_invariants(bus, s)
            assert not per_invocation(log, "ToolCallApproved")
            assert not per_invocation(log, "ToolCallDenied")
        assert d.runs("runs.txt") == []


async def test_an_approval_instance_stopped_hands_its_prompts_over_at_once(
    tmp_path: Path,
) -> None:
    """SIGTERM: the stopping instance hands its leases over (marked as an expiry would be),
    so the other lists its prompts long before the 30 s lease TTL would have run out."""
    names = ("approval", "approval_b")
    async with deployment(
        tmp_path,
        ONE_CALL,
        TURNSTREAM_SECURITY_MODE="ask",
        TURNSTREAM_LEASE_TTL_S="30",
        TURNSTREAM_LEASE_RENEW_S="3",
    ) as (d, bus):
        d.start("approval", as_name="approval_b")
        await d.ready("approval_b")
        sessions = await prompts_on_both(d, bus, names)
        asked = {p["interactionId"] for p in await pending_prompts(bus)}
        assert len(asked) == len(sessions)
        d.signal("approval", signal.SIGTERM)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 8
        while (listed := {p["interactionId"] for p in await pending_prompts(bus)}) != asked:
            assert loop.time() < deadline, f"not handed over: {asked - listed}"
            await asyncio.sleep(0.2)
        for s in sessions:
            assert pid_of(await holder(bus, s), d, names) == "approval_b"
