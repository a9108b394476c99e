"""Reading a session costs the server no consumer (issue 19, item 1): batched direct gets
page through the session's subject, and many reads at once stay under the server's cap on
a stream's consumers."""

from __future__ import annotations

import asyncio

from tests.integration.test_event_store import ev
from turnstream.bus import Bus
from turnstream.bus.scan import direct_read


async def test_direct_read_pages_through_one_session_among_others(bus: Bus) -> None:
    mine, other = "direct-mine", "direct-other"
    for _ in range(5):
        await bus.store.append_facts([ev(mine), ev(mine), ev(other), ev(mine), ev(other)])
    expected = [s.seq for s in await bus.store.read_all() if s.event.session_id == mine]
    assert len(expected) == 15
    for batch in (1, 4, 15, 500):
        seen: list[int] = []
        last = await direct_read(
            bus.nc,
            bus.subjects.log_stream,
            bus.subjects.log_session(mine),
            lambda seq, _subject, _data, seen=seen: seen.append(seq),
            batch=batch,
        )
        assert seen == expected and last == expected[-1], batch
    after = await bus.store.read_session(mine, after_seq=expected[6])
    assert [s.seq for s in after] == expected[7:]
    assert await bus.store.read_session(mine, after_seq=expected[-1]) == []
    assert await bus.store.read_session("direct-none") == []


async def test_1500_sessions_read_at_once_open_no_consumer(bus: Bus) -> None:
    sessions = [f"direct-many-{i}" for i in range(1500)]
    await bus.store.append_facts([ev(s) for s in sessions])
    before = (await bus.js.stream_info(bus.subjects.log_stream)).state.consumer_count
    async with asyncio.timeout(60):
        reads = await asyncio.gather(*(bus.store.read_session(s) for s in sessions))
    assert all(
        len(r) == 1 and r[0].event.session_id == s for r, s in zip(reads, sessions, strict=True)
    )
    after = (await bus.js.stream_info(bus.subjects.log_stream)).state.consumer_count
    assert after == before
