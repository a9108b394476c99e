"""Agents across crashes (DESIGN §11): kill -9 the turn-runner (or the gateway) while a
reply goes out, while a sync sub-turn runs and while an async result is in flight; every
turn ends once, every reply and every child's result reaches its session once, and the
state rebuilt from each log equals the runner's live state."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.recovery.harness import Witness, check_invariants, deployment, events, wait_for
from turnstream.client import message_command, publish_command
from turnstream.core.events import (
    InputAccepted,
    MessageSent,
    SubTurnEnded,
    SubTurnResultDelivered,
    SubTurnSpawned,
    TurnEnded,
    decode,
)

pytestmark = pytest.mark.e2e
SCRIPT = """
replies:
  - text: "echo: {input}"
    delay_ms: 300
agents:
  researcher:
    - text: "researched: {input}"
      delay_ms: 600
  spawner:
    - tool_calls: [{name: spawn, arguments: {task: "find it", agent: researcher}}]
    - text: "child said: {last_tool_result}"
  asyncer:
    - tool_calls: [{name: spawn, arguments: {task: "later", agent: researcher, mode: async}}]
    - text: "spawned"
    - text: "follow-up: {input}"
"""


def agents_dir(root: Path) -> dict[str, str]:
    folder = root / "agents"
    folder.mkdir()
    for name in ("researcher", "spawner", "asyncer"):
        (folder / f"{name}.md").write_text(
            f"---\nname: {name}\ndescription: the {name}\n---\nYou are {name}.\n"
        )
    return {"TURNSTREAM_AGENTS": str(folder)}


async def seen(bus: Any, subject: str) -> asyncio.Queue[Any]:
    queue: asyncio.Queue[Any] = asyncio.Queue()
    await bus.nc.subscribe(subject, cb=queue.put)
    return queue


def of(log: list[Any], cls: type) -> list[Any]:
    return [e for e in log if isinstance(e, cls)]


REDELIVERED_S = 100
"""A fact the killed runner took and never acked comes back after the consumer's ack wait
(60 s): a session whose input it took waits that long (bus/consume.py)."""


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kill_after", ["ProviderRequestStarted", "TurnEnded"])
async def test_a_reply_reaches_its_session_once_across_a_runner_kill(
    tmp_path: Path, kill_after: str
) -> None:
    b, a = f"rb-{kill_after.lower()}", f"ra-{kill_after.lower()}"
    env = agents_dir(tmp_path)
    async with deployment(tmp_path, SCRIPT, **env) as (d, bus), Witness(bus, b) as witness:
        queue = await seen(bus, bus.subjects.log(b, kill_after))
        await publish_command(bus, b, message_command(b, "question", reply_to=a))
        await asyncio.wait_for(queue.get(), 60)
        d.kill9("turn_runner")
        await asyncio.sleep(0.5)
        d.start("turn_runner")
        await wait_for(bus, a, "TurnEnded", timeout=REDELIVERED_S)
        b_log = await check_invariants(bus, b, witness)
        a_log = await check_invariants(bus, a)
        assert len(of(b_log, MessageSent)) == 1
        replies = of(a_log, InputAccepted)
        assert len(replies) == 1 and replies[0].data.text == "echo: question"
        assert len(of(a_log, TurnEnded)) == 1


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kill", ["turn_runner", "gateway"])
async def test_a_sync_child_ends_once_across_a_kill(tmp_path: Path, kill: str) -> None:
    parent = f"par-sync-{kill}"
    env = agents_dir(tmp_path)
    async with deployment(tmp_path, SCRIPT, **env) as (d, bus), Witness(bus, parent) as witness:
        queue = await seen(bus, bus.subjects.log(parent, "SubTurnSpawned"))
        await publish_command(bus, parent, message_command(parent, "go", agent="spawner"))
        await asyncio.wait_for(queue.get(), 60)
        d.kill9(kill)  # the child's turn runs meanwhile (its model answers in 600 ms)
        await asyncio.sleep(0.5)
        d.start(kill)
        [ended] = await wait_for(bus, parent, "TurnEnded", timeout=REDELIVERED_S)
        log = await check_invariants(bus, parent, witness)
        assert ended.data.status == "completed", ended
        assert ended.data.reply == "child said: researched: find it"
        [spawned] = of(log, SubTurnSpawned)
        assert len(of(log, SubTurnEnded)) == len(of(log, SubTurnResultDelivered)) == 1
        child_log = await check_invariants(bus, spawned.data.child_session_id)
        assert len(of(child_log, TurnEnded)) == 1 and len(of(child_log, MessageSent)) == 1


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kill", ["turn_runner", "gateway"])
async def test_an_async_result_in_flight_is_delivered_once(tmp_path: Path, kill: str) -> None:
    parent = f"par-async-{kill}"
    env = agents_dir(tmp_path)
    async with deployment(tmp_path, SCRIPT, **env) as (d, bus), Witness(bus, parent) as witness:
        spawned_q = await seen(bus, bus.subjects.log(parent, "SubTurnSpawned"))
        await publish_command(bus, parent, message_command(parent, "go", agent="asyncer"))
        spawned = await asyncio.wait_for(spawned_q.get(), 60)
        child = decode(spawned.data).data.child_session_id
        await wait_for(bus, child, "TurnEnded", timeout=60)  # stored: nothing to miss
        d.kill9(kill)  # the child's reply is going out, or just went
        await asyncio.sleep(0.5)
        d.start(kill)
        [delivered] = await wait_for(bus, parent, "SubTurnResultDelivered", timeout=REDELIVERED_S)
        assert isinstance(delivered, SubTurnResultDelivered)
        if delivered.data.delivered_as == "follow_up":  # the result's own turn ends too
            await wait_for(bus, parent, "TurnEnded", count=2, timeout=REDELIVERED_S)
        log = await check_invariants(bus, parent, witness)
        assert len(of(log, SubTurnResultDelivered)) == 1
        assert len(of(log, SubTurnEnded)) == 1
        child_log = await events(bus, child)
        assert len(of(child_log, MessageSent)) == 1
