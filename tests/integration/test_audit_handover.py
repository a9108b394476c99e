"""Two holders of one partition across a handover (the old one paused, the new one taking
over): each violation is in the log once, whoever appends first (`audit/report.py`)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.integration.test_audit import violations_of
from tests.unit.audit_events import ended, start, tool_run, turn
from turnstream.audit import report
from turnstream.audit.checks import CheckConfig, Finding
from turnstream.audit.fold import fold_message
from turnstream.audit.worker import PartitionAudit
from turnstream.bus import Bus
from turnstream.bus.scan import scan_log
from turnstream.core.events import AuditViolation


async def taken_over(bus: Bus, folder: Path) -> PartitionAudit:
    """A worker that has folded the partition (what a take-over does before it writes)."""
    worker = PartitionAudit(bus, 0, CheckConfig(), folder / "audit.jsonl", source="audit/t")
    worker.kv = await bus.js.key_value(bus.subjects.sessions_bucket)
    assert await worker._open_journal(asyncio.Event())
    await scan_log(
        bus.js,
        bus.subjects,
        lambda seq, subject, data: fold_message(worker.auditor, worker.journal, seq, subject, data),
        stream=worker.stream,
    )
    worker.auditor.tick(datetime.now(UTC))
    return worker


async def test_two_holders_that_found_the_same_violations_append_them_once(
    bus: Bus, tmp_path: Path
) -> None:
    now = datetime.now(UTC)
    await bus.store.append_facts(
        [
            *turn("race", "t1"),
            ended("race", "t1", "failed"),
            start("race", "t2"),
            *tool_run("race", "t2", "inv-r", approved=False),
            ended("race", "t2"),
            start("race", "t3", at=now - timedelta(hours=2)),
        ]
    )
    old = await taken_over(bus, tmp_path / "old")
    new = await taken_over(bus, tmp_path / "new")  # the old one has appended nothing yet
    stop = asyncio.Event()
    try:
        assert await new._flush(stop)
        assert await old._flush(stop)  # woke up still holding (here): finds them in the log
    finally:
        old.journal.close()
        new.journal.close()
    kinds = sorted(v.data.kind for v in await violations_of(bus, "race"))
    assert kinds == ["duplicate_terminal", "turn_overdue", "unapproved_tool_run"]


def violation(session: str, key: str) -> AuditViolation:
    about = turn(session, "t1")[0]
    return Finding("duplicate_terminal", key, about.time, "test", about).event(
        datetime.now(UTC), "audit/t"
    )


async def test_a_stale_read_is_fenced_and_read_again(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An instance that read the session's violations before another appended one has its
    append refused by the fence, reads again, and appends only what is not there; no
    duplicate window is needed (the two violations differ)."""
    first, second = violation("fence", "a"), violation("fence", "b")
    stale = await report.in_log(bus, "fence")  # read before `first` is appended
    assert await report.report_once(bus, [first], lambda: True) == [first]
    reads: list[tuple[set[str], int]] = []
    real = report.in_log

    async def once_stale(bus_: Bus, session: str) -> tuple[set[str], int]:
        reads.append(stale if not reads else await real(bus_, session))
        return reads[-1]

    monkeypatch.setattr(report, "in_log", once_stale)
    assert await report.report_once(bus, [first, second], lambda: True) == [second]
    assert len(reads) == 2  # refused once, read again
    assert [v.id for v in await violations_of(bus, "fence")] == [first.id, second.id]


async def test_an_instance_that_lost_its_lease_reports_nothing(bus: Bus) -> None:
    with pytest.raises(report.NotOwner):
        await report.report_once(bus, [violation("lost", "a")], lambda: False)
    assert await violations_of(bus, "lost") == []
