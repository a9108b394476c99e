"""Reading a session costs the server no consumer (issue 19, item 1): batched direct gets
page through the session's subject, and many reads at once stay under the server's cap on
a stream's consumers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from tests.integration.test_event_store import ev
from turnstream.bus import Bus
from turnstream.bus.scan import DirectGetError, DirectReads
from turnstream.bus.store import JetStreamEventStore
from turnstream.core.subjects import Subjects
from turnstream.http.direct import DirectGets


async def test_direct_read_pages_through_one_session_among_others(bus: Bus) -> None:
    mine, other = "direct-mine", "direct-other"
    for _ in range(5):
        await bus.store.append_facts([ev(mine), ev(mine), ev(other), ev(mine), ev(other)])
    expected = [s.seq for s in await bus.store.read_all() if s.event.session_id == mine]
    assert len(expected) == 15
    for batch in (1, 4, 15, 500):
        seen: list[int] = []
        last = await DirectReads(bus.nc).read(
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


async def test_a_counted_read_asks_for_exactly_the_sessions_events(bus: Bus) -> None:
    """A latest read counts the session's events first and asks for no more than remain
    (asked for more, the server reads the rest of the log to fill the batch:
    bench/session_reads.py), batch after batch, and still reads them all."""
    mine, other = "direct-counted", "direct-counted-other"
    for _ in range(3):
        await bus.store.append_facts([ev(mine), ev(other), ev(mine)])
    expected = [s.seq for s in await bus.store.read_session(mine)]
    assert len(expected) == 6
    asked: list[bytes] = []
    reads = DirectReads(bus.nc)
    batch = reads.batch

    async def counted(*args: object, **kwargs: object) -> int:
        asked.append(orjson.dumps(kwargs["batch"]))
        return await batch(*args, **kwargs)  # type: ignore[arg-type]

    reads.batch = counted  # type: ignore[method-assign]
    seen: list[int] = []
    last = await reads.read(
        bus.subjects.log_stream,
        bus.subjects.log_session(mine),
        lambda seq, _s, _d: seen.append(seq),
        batch=4,
        count=6,
    )
    assert seen == expected and last == expected[-1]
    assert asked == [b"4", b"2"]  # never more than remain
    assert [s.seq for s in await bus.store.read_session(mine, latest=True)] == expected
    after = await bus.store.read_session(mine, after_seq=expected[2], latest=True, events_before=3)
    assert [s.seq for s in after] == expected[3:]


def counting(store: JetStreamEventStore) -> list[int]:
    """The direct gets `store` asks from here on (one entry per batch asked)."""
    asked: list[int] = []
    batch = store.direct.batch

    async def counted(*args: Any, **kwargs: Any) -> int:
        asked.append(kwargs["batch"])
        return await batch(*args, **kwargs)

    store.direct.batch = counted  # type: ignore[method-assign]
    return asked


async def test_a_new_sessions_delivered_first_event_is_all_it_reads(bus: Bus) -> None:
    """A runner's first read of a new session (issue 41): counted on the leader, the log
    holds only the event delivered, which is taken as it came; no read is asked."""
    store = JetStreamEventStore(bus.nc, bus.js, bus.subjects)
    asked = counting(store)
    mine = "direct-first"
    first = ev(mine)
    [seq] = await store.append_facts([first])
    [read] = await store.read_session(mine, known={seq: first}, latest=True)
    assert read.seq == seq and read.event is first
    assert asked == []
    # one more event than the delivered one: read, and the delivered one taken as it is
    [seq2] = await store.append_facts([second := ev(mine)])
    read2 = await store.read_session(mine, known={seq2: second}, latest=True)
    assert [(x.seq, x.event.id) for x in read2] == [(seq, first.id), (seq2, second.id)]
    assert read2[1].event is second and asked == [2]


async def test_known_events_from_a_snapshot_on_are_read_all_the_same(bus: Bus) -> None:
    """From a snapshot on, a count that comes out right (a log trimmed before the snapshot,
    one unknown event after it) does not spare the read: the unknown one is found."""
    store = JetStreamEventStore(bus.nc, bus.js, bus.subjects)
    asked = counting(store)
    mine = "direct-trimmed"
    seqs = await store.append_facts([ev(mine), unknown := ev(mine), delivered := ev(mine)])
    # as if the snapshot at seqs[0] counted two events, one of them trimmed since
    read = await store.read_session(
        mine, after_seq=seqs[0], known={seqs[2]: delivered}, latest=True, events_before=2
    )
    assert [x.event.id for x in read] == [unknown.id, delivered.id]
    assert asked


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


async def read_and_cancel(bus: Bus, session: str, position: int, hops: int) -> str | None:
    """Read `session` by direct gets, cancelling the read `hops` loop iterations after its
    `position`th reply: None when the read had ended by then, else how it ended."""
    loop = asyncio.get_running_loop()
    accepted: list[bool] = []
    handed: list[int] = []

    def cancel_later(n: int) -> None:
        if n:
            loop.call_soon(cancel_later, n - 1)
        else:
            accepted.append(reading.cancel())

    def on_event(seq: int, _subject: str, _data: bytes) -> None:
        handed.append(seq)
        if len(handed) == position:
            cancel_later(hops)

    subject = bus.subjects.log_session(session)
    reading = asyncio.create_task(
        DirectReads(bus.nc).read(bus.subjects.log_stream, subject, on_event, batch=20)
    )
    await asyncio.wait([reading], timeout=10)
    assert reading.done(), "the read neither ended nor was cancelled"
    if accepted != [True]:
        return None
    return "cancelled" if reading.cancelled() else repr(reading)


async def test_a_direct_read_cancelled_mid_batch_ends_cancelled(bus: Bus) -> None:
    """A read cancelled while a batch's replies arrive ends cancelled, whatever the moment.
    nats-py's `next_msg` (on Python 3.11) returned the reply it already had instead: the
    runner's session workers, cancelled at shutdown, then lived on, and the services'
    shutdown waited minutes for them (test_tools_path.py hung one run in five)."""
    session = "direct-cancelled"
    await bus.store.append_facts([ev(session) for _ in range(60)])
    outcomes = [
        await read_and_cancel(bus, session, position, hops)
        for position in (1, 7, 20, 30, 45)
        for hops in range(8)
    ]
    ended = [o for o in outcomes if o is not None]
    assert len(ended) >= 30  # most cancels came while the read was running
    assert [o for o in ended if o != "cancelled"] == []


async def test_a_log_without_direct_gets_is_read_with_a_consumer(bus: Bus) -> None:
    """A log stream made before `allow_direct` answers direct gets with 503 (no one
    answers them): a session is still read, the slower way."""
    subjects = Subjects("nodirect")
    await bus.js.add_stream(name=subjects.log_stream, subjects=[f"{subjects.prefix}.log.>"])
    store = JetStreamEventStore(bus.nc, bus.js, subjects)
    events = [ev("plain"), ev("plain"), ev("other"), ev("plain")]
    await store.append_facts(events)
    with pytest.raises(DirectGetError, match="503"):
        await DirectReads(bus.nc).read(
            subjects.log_stream, subjects.log_session("plain"), lambda *_: None
        )
    async with asyncio.timeout(10):
        stored = await store.read_session("plain")
    assert [s.event for s in stored] == [e for e in events if e.session_id == "plain"]


async def test_the_stores_session_reads_share_one_subscription(bus: Bus) -> None:
    """A reload costs no subscription of its own: every read of a store takes its replies
    on one, and a read cancelled midway leaves nothing behind."""
    store = JetStreamEventStore(bus.nc, bus.js, bus.subjects)
    sessions = [f"shared-read-{i}" for i in range(20)]
    await bus.store.append_facts([ev(s) for s in sessions for _ in range(3)])
    before = len(bus.nc._subs)
    reads = await asyncio.gather(*(store.read_session(s) for s in sessions))
    assert [len(r) for r in reads] == [3] * 20
    assert len(bus.nc._subs) == before + 1
    reading = asyncio.create_task(store.read_session(sessions[0]))
    await asyncio.sleep(0)
    reading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reading
    assert store.direct.waiting == {}
    assert [s.seq for s in await store.read_session(sessions[1])] == [r.seq for r in reads[1]]


async def test_a_read_takes_the_events_it_is_given_as_they_are(bus: Bus) -> None:
    """A reload on a delivered fact reads the fact too: it is not decoded a second time."""
    session = "direct-known"
    await bus.store.append_facts([ev(session), ev(session), ev(session)])
    stored = await bus.store.read_session(session)
    given = ev(session)  # stands for the delivered, decoded fact at the second sequence
    again = await bus.store.read_session(session, known={stored[1].seq: given})
    assert [s.seq for s in again] == [s.seq for s in stored]
    assert again[1].event is given
    assert again[0].event == stored[0].event and again[2].event == stored[2].event


class BehindReplica:
    """Direct reads answered as a replica that has not applied the last `behind` appends
    yet would answer them (R3: any replica answers a direct get)."""

    def __init__(self, reads: DirectReads, behind: int) -> None:
        self.reads, self.behind = reads, behind

    async def read(
        self,
        stream: str,
        subject: str,
        on_msg: Callable[[int, str, bytes], None],
        *,
        after_seq: int = 0,
        count: int | None = None,
    ) -> int:
        got: list[tuple[int, str, bytes]] = []
        await self.reads.read(
            stream, subject, lambda *m: got.append(m), after_seq=after_seq, count=count
        )
        kept = got[: len(got) - self.behind]
        for message in kept:
            on_msg(*message)
        return kept[-1][0] if kept else after_seq


async def test_a_read_behind_a_known_fact_is_read_again_up_to_the_leaders_last(bus: Bus) -> None:
    session = "direct-behind"
    await bus.store.append_facts([ev(session), ev(session), ev(session)])
    stored = await bus.store.read_session(session)
    fact = stored[-1]
    store = JetStreamEventStore(bus.nc, bus.js, bus.subjects)
    store.direct = BehindReplica(store.direct, behind=1)  # type: ignore[assignment]
    assert [s.seq for s in await store.read_session(session)] == [s.seq for s in stored[:2]]
    covered = await store.read_session(session, known={fact.seq: fact.event})
    assert [s.seq for s in covered] == [s.seq for s in stored]
    assert covered[-1].event is fact.event


class Asked:
    """A store's direct reads, recording the count each read was given."""

    def __init__(self, reads: DirectReads) -> None:
        self.reads, self.counts = reads, list[int | None]()

    async def read(self, *args: Any, count: int | None = None, **kwargs: Any) -> int:
        self.counts.append(count)
        return await self.reads.read(*args, count=count, **kwargs)


async def test_every_read_of_a_session_from_its_start_is_counted(bus: Bus) -> None:
    """Not only a runner's reload: the approval service's (a delivered fact given) and the
    HTTP face's session view read from the start without `latest`, and ask the log for
    exactly the session's events too, the right ones."""
    mine, other = "counted-everywhere", "counted-everywhere-other"
    for _ in range(4):
        await bus.store.append_facts([ev(mine), ev(other), ev(mine)])
    await bus.store.append_facts([ev(other) for _ in range(20)])  # the log goes on after it
    expected = [s for s in await bus.store.read_all() if s.event.session_id == mine]
    store = JetStreamEventStore(bus.nc, bus.js, bus.subjects)
    asked = Asked(store.direct)
    store.direct = asked  # type: ignore[assignment]
    assert await store.read_session(mine) == expected
    fact = expected[3]
    given = await store.read_session(mine, known={fact.seq: fact.event})
    assert given == expected and given[3].event is fact.event
    tail = await store.read_session(mine, after_seq=expected[4].seq, events_before=5)
    assert tail == expected[5:]
    assert asked.counts == [8, 8, 3]
    assert await store.read_session("counted-nobody") == []  # counted 0: nothing asked
    assert asked.counts == [8, 8, 3]


async def test_the_http_faces_pages_ask_for_no_more_than_remain(bus: Bus) -> None:
    session, other = "paged-counted", "paged-counted-other"
    for _ in range(7):
        await bus.store.append_facts([ev(session), ev(other)])
    await bus.store.append_facts([ev(other) for _ in range(20)])
    expected = [s.seq for s in await bus.store.read_session(session)]
    direct = DirectGets(bus)
    sizes: list[int] = []
    batch = direct.reads.batch

    async def recorded(*args: Any, **kwargs: Any) -> int:
        sizes.append(kwargs["batch"])
        return await batch(*args, **kwargs)

    direct.reads.batch = recorded  # type: ignore[method-assign]
    try:
        page, more = await direct.page(session, after=0, limit=100)
        assert [r.seq for r in page] == expected and more == 0
        assert sizes == [7]  # its count, not the 100 asked for
        sizes.clear()
        assert [r.seq async for r in direct.records(session, after=0, limit=3)] == expected
        assert sizes == [3, 3, 1]
        sizes.clear()
        later, more = await direct.page(session, after=expected[4], limit=100)
        assert [r.seq for r in later] == expected[5:] and more == 0
        assert await direct.page("paged-nobody", after=0, limit=10) == ([], 0)
    finally:
        await direct.stop()
