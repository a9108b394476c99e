"""Two turn-runner processes over a log of four partitions: each holds two partitions
(`turn-runner.part.<k>`) and binds the `turn-runner` consumer of those alone, so no fact
is nak'd for routing (no consumer redelivers anything); one killed with SIGKILL mid-turns
has its partitions taken by the other within the lease TTL and a few seconds, every turn
ending once and each tool running once; one stopped (SIGTERM) hands over at once."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from tests.recovery.harness import Deployment, check_invariants, deployment, wait_for
from tests.recovery.test_two_audits_partitioned import spread
from tests.recovery.test_two_runners import SCRIPT
from turnstream.bus import Bus
from turnstream.client import message_command, publish_command
from turnstream.core.events import TurnEnded
from turnstream.turn_runner.app import DURABLE
from turnstream.turn_runner.ownership import SERVICE

pytestmark = pytest.mark.e2e
N = 4
LEASE_TTL_S = 2.0  # the harness's FAST_LEASES
NAMES = ("turn_runner", "turn_runner_b")


async def holders(d: Deployment, bus: Bus) -> dict[int, str | None]:
    """Which runner process holds each partition (None: nobody)."""
    kv = await bus.js.key_value(bus.subjects.leases_bucket)
    found: dict[int, str | None] = {}
    for k in range(N):
        try:
            owner = (await kv.get(f"{SERVICE}.part.{k}")).value.decode()
        except Exception:
            owner = ""
        found[k] = next((n for n in d.procs if n in NAMES and f"-{d.pid(n)}" in owner), None)
    return found


async def until_held(d: Deployment, bus: Bus, want: dict[str, int], timeout: float) -> None:
    async with asyncio.timeout(timeout):
        while True:
            held = list((await holders(d, bus)).values())
            if all(held.count(name) == count for name, count in want.items()):
                return
            await asyncio.sleep(0.1)


async def redelivered(bus: Bus) -> int:
    """Messages the runner's consumers delivered more than once, over every partition."""
    infos = [await bus.js.consumer_info(s, DURABLE) for s in bus.subjects.log_streams]
    return sum(info.num_redelivered for info in infos)


async def turns(bus: Bus, sessions: list[str], round_: int) -> None:
    for s in sessions:
        await publish_command(bus, s, message_command(s, f"{s}-{round_}"))


async def ended_once(d: Deployment, bus: Bus, sessions: list[str], rounds: int) -> set[str]:
    """Every session's turns ended once, completed, and each tool ran once; the sources."""
    sources: set[str] = set()
    invocations: list[str] = []
    for s in sessions:
        await wait_for(bus, s, "TurnEnded", count=rounds)
        log = await check_invariants(bus, s)
        ended = [e for e in log if isinstance(e, TurnEnded)]
        assert [e.data.status for e in ended] == ["completed"] * rounds, (s, ended)
        invocations += [e.data.invocation_id for e in log if e.type == "ToolInvocationStarted"]
        sources |= {e.source for e in log if e.source.startswith("turn-runner/")}
    assert sorted(d.runs("runs.txt")) == sorted(invocations)
    assert len(invocations) == len(sessions) * rounds
    return sources


async def two_runners(d: Deployment, bus: Bus) -> None:
    d.start("turn_runner", as_name="turn_runner_b")
    await d.ready("turn_runner_b")
    await until_held(d, bus, {"turn_runner": 2, "turn_runner_b": 2}, timeout=30)


async def test_two_runners_hold_two_partitions_each_and_no_fact_bounces(tmp_path: Path) -> None:
    async with deployment(tmp_path, SCRIPT, log_partitions=N) as (d, bus):
        await two_runners(d, bus)
        sessions = spread(bus, "part", 3)
        for round_ in range(2):
            await turns(bus, sessions, round_)
            for s in sessions:
                await wait_for(bus, s, "TurnEnded", count=round_ + 1)
        sources = await ended_once(d, bus, sessions, 2)
        assert len(sources) == 2, sources  # both runners took part
        assert await redelivered(bus) == 0  # nothing nak'd for routing, nothing timed out
        for s in sessions:  # a session is acted for by its partition's holder alone
            log = await check_invariants(bus, s)
            assert len({e.source for e in log if e.source.startswith("turn-runner/")}) == 1


async def test_a_killed_runner_s_partitions_are_taken_over_every_turn_ends_once(
    tmp_path: Path,
) -> None:
    async with deployment(tmp_path, SCRIPT, log_partitions=N) as (d, bus):
        await two_runners(d, bus)
        sessions = spread(bus, "kill", 4)
        first, second = sessions[: len(sessions) // 2], sessions[len(sessions) // 2 :]
        await turns(bus, first, 0)
        await wait_for(bus, first[0], "ToolInvocationRequested")
        loop = asyncio.get_running_loop()
        d.kill9("turn_runner")  # mid-turns
        killed_at = loop.time()
        await turns(bus, second, 0)
        await until_held(d, bus, {"turn_runner_b": N}, timeout=LEASE_TTL_S + 10)
        assert loop.time() - killed_at < LEASE_TTL_S + 6
        await ended_once(d, bus, sessions, 1)


async def test_a_stopped_runner_hands_its_partitions_over_at_once(tmp_path: Path) -> None:
    async with deployment(
        tmp_path,
        SCRIPT,
        log_partitions=N,
        TURNSTREAM_LEASE_TTL_S="30",
        TURNSTREAM_LEASE_RENEW_S="3",
    ) as (d, bus):
        await two_runners(d, bus)
        sessions = spread(bus, "stop", 2)
        await turns(bus, sessions, 0)
        loop = asyncio.get_running_loop()
        d.signal("turn_runner", signal.SIGTERM)
        stopped_at = loop.time()
        await until_held(d, bus, {"turn_runner_b": N}, timeout=8)
        assert loop.time() - stopped_at < 8  # long before the 30 s TTL
        await turns(bus, sessions, 1)
        await ended_once(d, bus, sessions, 2)
