"""Archiving ended sessions to the object store: the log is freed, replay reads the archive,
open and recent sessions stay in the log."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.integration.partitioned import log_partitions_1_and_4  # noqa: F401 (fixture)
from tests.unit.audit_events import T0, event, start, turn
from turnstream.bus import Bus
from turnstream.bus.archive import archive_sessions, read_archived
from turnstream.client import replay_session
from turnstream.core.events import Event, SessionTurnEnd

pytestmark = pytest.mark.integration


def ended_turn(session: str, turn_id: str, at: datetime = T0) -> list[Event]:
    events = turn(session, turn_id, reply=f"reply of {turn_id}")
    return [*events, event(SessionTurnEnd, session, turn_id, {"status": "completed"}, at)]


async def test_an_old_ended_session_moves_to_the_archive_and_replays_the_same(bus: Bus) -> None:
    await bus.store.append("arch-old", ended_turn("arch-old", "t1") + ended_turn("arch-old", "t2"))
    await bus.store.append("arch-open", [start("arch-open", "t1")])  # a turn still open
    recent = datetime.now(UTC)
    await bus.store.append("arch-new", ended_turn("arch-new", "t1", at=recent))
    before = await replay_session(bus, "arch-old")
    cutoff = recent - timedelta(minutes=1)

    listed = await archive_sessions(bus, cutoff, dry_run=True)
    assert [a.session_id for a in listed if a.session_id.startswith("arch-")] == ["arch-old"]
    assert await bus.store.read_session("arch-old")  # a dry run changes nothing

    done = await archive_sessions(bus, cutoff)
    assert [(a.session_id, a.events) for a in done if a.session_id.startswith("arch-")] == [
        ("arch-old", len(before.events))
    ]
    assert await bus.store.read_session("arch-old") == []
    assert await bus.store.read_session("arch-open") and await bus.store.read_session("arch-new")
    after = await replay_session(bus, "arch-old")
    assert after.state == before.state
    assert [e.id for e in after.events] == [e.id for e in before.events]
    assert after.last_seq == before.last_seq

    # talked to again, then archived again: one file, the old part first
    await bus.store.append("arch-old", ended_turn("arch-old", "t3"))
    await archive_sessions(bus, cutoff)
    archived = await read_archived(bus, "arch-old")
    assert [e.event.turn_id for e in archived][-1] == "t3"
    assert [s.seq for s in archived] == sorted(s.seq for s in archived)
    assert len(archived) == len(before.events) + len(ended_turn("x", "y"))


async def test_a_session_never_archived_reads_as_empty(bus: Bus) -> None:
    assert await read_archived(bus, "never-archived") == []
