"""Two audit processes over a log of four partitions (needs the partitioned log): each
holds two; one killed with SIGKILL mid-load has its partitions taken by the other within
the lease TTL and a few seconds; every turn's summary is written, each violation (caused
in every partition before and during the handover) is in the log once, and every chain
in both data dirs verifies (`turnstream audit verify DATA_DIR`, naming the partitions)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.recovery.harness import Deployment, deployment, wait_for
from tests.recovery.test_two_audits import (
    LEASE_TTL_S,
    NAMES,
    SCRIPT,
    bad_turn,
    current_summary,
    start_audits,
    until_recorded,
    violations,
)
from turnstream.audit.journal import chain_path
from turnstream.bus import Bus
from turnstream.cli.audit import audit_app
from turnstream.client import message_command, publish_command

pytestmark = pytest.mark.e2e
N = 4


async def holders(d: Deployment, bus: Bus) -> dict[int, str | None]:
    """Which audit process holds each partition (None: nobody)."""
    kv = await bus.js.key_value(bus.subjects.leases_bucket)
    found: dict[int, str | None] = {}
    for k in range(N):
        try:
            owner = (await kv.get(f"audit.part.{k}")).value.decode()
        except Exception:
            owner = ""
        found[k] = next((n for n in NAMES if owner and f"-{d.pid(n)}/" in owner), None)
    return found


async def until_held(d: Deployment, bus: Bus, want: dict[str, int], timeout: float) -> None:
    async with asyncio.timeout(timeout):
        while True:
            held = list((await holders(d, bus)).values())
            if all(held.count(name) == count for name, count in want.items()):
                return
            await asyncio.sleep(0.2)


def spread(bus: Bus, prefix: str, per_partition: int) -> list[str]:
    subjects, found, i = bus.subjects, [], 0
    while len(found) < per_partition * N:
        candidate, i = f"{prefix}-{i}", i + 1
        k = subjects.partition_of(candidate)
        if sum(subjects.partition_of(s) == k for s in found) < per_partition:
            found.append(candidate)
    return found


async def test_a_killed_audit_s_partitions_are_taken_over_nothing_missed_or_doubled(
    tmp_path: Path,
) -> None:
    async with deployment(tmp_path, SCRIPT, log_partitions=N) as (d, bus):
        start_audits(d, tmp_path)
        await until_held(d, bus, {"audit": 2, "audit_b": 2}, timeout=30)
        before, during = spread(bus, "bad-before", 1), spread(bus, "bad-during", 1)
        for s in before:
            await bus.store.append_facts(bad_turn(s))
        for s in before:
            await wait_for(bus, s, "AuditViolation")
        sessions = spread(bus, "load", 6)
        for s in sessions[: len(sessions) // 2]:
            await publish(bus, s)
        await wait_for(bus, sessions[3], "TurnEnded")
        loop = asyncio.get_running_loop()
        d.kill9("audit")  # mid-load
        killed_at = loop.time()
        for s in during:
            await bus.store.append_facts(bad_turn(s))
        for s in sessions[len(sessions) // 2 :]:
            await publish(bus, s)
        await until_held(d, bus, {"audit_b": N}, timeout=LEASE_TTL_S + 10)
        assert loop.time() - killed_at < LEASE_TTL_S + 6
        for s in sessions:
            await wait_for(bus, s, "TurnEnded")
            summary = await current_summary(bus, s)
            assert summary.status == "completed" and summary.turns == 1, summary
        for s in before + during:
            await wait_for(bus, s, "AuditViolation")
            assert (await current_summary(bus, s)).violations == 1
        await asyncio.sleep(1.5)  # a second copy would be appended by now
        for s in before + during:
            assert [v.data.kind for v in await violations(bus, s)] == ["duplicate_terminal"]
        for s in sessions:
            assert await violations(bus, s) == []
        for k, stream in enumerate(bus.subjects.log_streams):
            last = (await bus.js.stream_info(stream)).state.last_seq
            await until_recorded(chain_path(tmp_path / "audit_b", N, k), last)
    for name in NAMES:
        checked = CliRunner().invoke(audit_app, ["verify", str(tmp_path / name)])
        assert checked.exit_code == 0, checked.output
        shown = [k for k in range(N) if f"partition {k} " in checked.output]
        assert shown == list(range(N)) if name == "audit_b" else len(shown) >= 2, checked.output


async def publish(bus: Bus, session: str) -> None:
    await publish_command(bus, session, message_command(session, "hello"))
