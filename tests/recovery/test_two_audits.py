"""Two audit processes on one deployment (one log partition, the default): one holds the
partition, the other stands by. The holder killed with SIGKILL mid-load is taken over
within the lease TTL and a few seconds; every turn's summary is written, each violation
(caused before and during the handover) is in the log once, and both audit files verify.
SIGTERM hands the partition over at once."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import orjson
import pytest

from tests.recovery.harness import Deployment, deployment, wait_for
from tests.unit.audit_events import ended, turn
from turnstream.audit.chain import verify
from turnstream.bus import Bus
from turnstream.client import message_command, publish_command
from turnstream.core.events import AuditViolation, Event
from turnstream.core.subjects import session_key
from turnstream.core.summary import SessionSummary

pytestmark = pytest.mark.e2e
LEASE_TTL_S = 2.0  # the harness's FAST_LEASES
SCRIPT = 'replies:\n  - text: "ok: {input}"\n'
NAMES = ("audit", "audit_b")
CONSUMING = "audit partition 0 consuming"


def start_audits(d: Deployment, root: Path) -> None:
    """Two audit instances, each with its own data dir (its own audit file), as in
    production."""
    for name in NAMES:
        d.start("audit", as_name=name, TURNSTREAM_DATA_DIR=str(root / name))


async def holder(bus: Bus) -> str | None:
    kv = await bus.js.key_value(bus.subjects.leases_bucket)
    try:
        entry = await kv.get("audit.part.0")
    except Exception:
        return None
    return entry.value.decode() if entry.value else None


async def holding(d: Deployment, bus: Bus, timeout: float = 30) -> str:
    """The name of the audit process holding partition 0 (its lease names its pid)."""
    async with asyncio.timeout(timeout):
        while True:
            owner = await holder(bus)
            found = [n for n in NAMES if owner and f"-{d.pid(n)}/" in owner]
            if found:
                return found[0]
            await asyncio.sleep(0.1)


async def summary_of(bus: Bus, session: str) -> SessionSummary | None:
    kv = await bus.js.key_value(bus.subjects.sessions_bucket)
    try:
        entry = await kv.get(session_key(session))
    except Exception:
        return None
    return SessionSummary.from_json(entry.value) if entry.value else None


async def current_summary(bus: Bus, session: str, timeout: float = 30) -> SessionSummary:
    last = await bus.store.last_seq(session)
    async with asyncio.timeout(timeout):
        while True:
            summary = await summary_of(bus, session)
            if summary is not None and summary.last_seq >= last:
                return summary
            await asyncio.sleep(0.1)


async def violations(bus: Bus, session: str) -> list[AuditViolation]:
    return [
        s.event
        for s in await bus.store.read_session(session)
        if isinstance(s.event, AuditViolation)
    ]


def bad_turn(session: str) -> list[Event]:
    """A turn with two terminal events: one `duplicate_terminal` violation."""
    return [*turn(session, "t1"), ended(session, "t1", "failed")]


def last_recorded(path: Path) -> int:
    lines = path.read_bytes().splitlines() if path.exists() else []
    return int(orjson.loads(lines[-1])["seq"]) if lines else 0


async def until_recorded(path: Path, seq: int, timeout: float = 30) -> None:
    async with asyncio.timeout(timeout):
        while last_recorded(path) < seq:  # noqa: ASYNC110 (another process's file)
            await asyncio.sleep(0.2)


async def test_a_killed_audit_holder_is_taken_over_and_nothing_is_missed_or_doubled(
    tmp_path: Path,
) -> None:
    async with deployment(tmp_path, SCRIPT) as (d, bus):
        start_audits(d, tmp_path)
        first = await holding(d, bus)
        [survivor] = [n for n in NAMES if n != first]
        await d.ready(first, CONSUMING)
        await bus.store.append_facts(bad_turn("bad-before"))
        await wait_for(bus, "bad-before", "AuditViolation")
        sessions = [f"load-{i}" for i in range(40)]
        for s in sessions[:20]:
            await publish_command(bus, s, message_command(s, "hello"))
        await wait_for(bus, sessions[5], "TurnEnded")
        loop = asyncio.get_running_loop()
        d.kill9(first)  # mid-load: turns are still being taken and ended
        killed_at = loop.time()
        await bus.store.append_facts(bad_turn("bad-during"))
        for s in sessions[20:]:
            await publish_command(bus, s, message_command(s, "hello"))
        await d.ready(survivor, CONSUMING, timeout=LEASE_TTL_S + 10)
        taken_after = loop.time() - killed_at
        assert taken_after < LEASE_TTL_S + 6, taken_after
        for s in sessions:
            await wait_for(bus, s, "TurnEnded")
            summary = await current_summary(bus, s)
            assert summary.status == "completed" and summary.turns == 1, summary
        for s in ("bad-before", "bad-during"):
            summary = await current_summary(bus, s)
            assert summary.violations == 1, summary
        await asyncio.sleep(1.5)  # a second copy would be appended by now
        for s in ("bad-before", "bad-during"):
            assert [v.data.kind for v in await violations(bus, s)] == ["duplicate_terminal"]
        for s in sessions:
            assert await violations(bus, s) == []
        assert await holding(d, bus) == survivor
        last = (await bus.js.stream_info(bus.subjects.log_stream)).state.last_seq
        survivor_file = tmp_path / survivor / "audit.jsonl"
        await until_recorded(survivor_file, last)
    for name in NAMES:
        path = tmp_path / name / "audit.jsonl"
        verdict = verify(path.read_bytes().splitlines())
        assert verdict.ok, (name, verdict)
    survivor_seqs = [orjson.loads(x)["seq"] for x in survivor_file.read_bytes().splitlines()]
    assert survivor_seqs == list(range(1, survivor_seqs[-1] + 1))  # the whole log, in order


async def test_a_stopped_audit_holder_hands_its_partition_over_at_once(tmp_path: Path) -> None:
    async with deployment(
        tmp_path, SCRIPT, TURNSTREAM_LEASE_TTL_S="30", TURNSTREAM_LEASE_RENEW_S="3"
    ) as (d, bus):
        start_audits(d, tmp_path)
        first = await holding(d, bus)
        [other] = [n for n in NAMES if n != first]
        await d.ready(first, CONSUMING)
        await d.ready(other, "serving")
        loop = asyncio.get_running_loop()
        d.signal(first, signal.SIGTERM)
        stopped_at = loop.time()
        await d.ready(other, CONSUMING, timeout=8)
        assert loop.time() - stopped_at < 8  # long before the 30 s TTL
        assert await holding(d, bus, timeout=5) == other
        await publish_command(bus, "after-stop", message_command("after-stop", "hello"))
        await wait_for(bus, "after-stop", "TurnEnded")
        summary = await current_summary(bus, "after-stop")
        assert summary.status == "completed"
