"""One contract suite for the event store, run against JetStream and the in-memory store."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

import pytest

from tests.unit.factories import T0
from turnstream.bus import AppendConflict, Bus
from turnstream.bus.appender import AppendError
from turnstream.bus.contract import EventStore
from turnstream.bus.memory import InMemoryEventStore
from turnstream.bus.store import JetStreamEventStore
from turnstream.core.events import SessionTurnEnd, SessionTurnEndData

_ids = itertools.count(1)


def ev(session: str, n: int | None = None) -> SessionTurnEnd:
    n = n if n is not None else next(_ids)
    return SessionTurnEnd(
        id=f"01a20000-0000-7000-8000-{n:012d}",
        time=T0,
        session_id=session,
        chat_id="c",
        turn_id="t",
        trace_id="tr",
        correlation_id="k",
        source="test/1",
        data=SessionTurnEndData(status="completed"),
    )


@pytest.fixture(params=["memory", "jetstream", "jetstream-unbatched"])
async def store(request: pytest.FixtureRequest, bus: Bus) -> AsyncIterator[EventStore]:
    if request.param == "memory":
        yield InMemoryEventStore()
    elif request.param == "jetstream":
        yield bus.store
    else:  # a server without fast-ingest batches: the first event alone, then the rest
        store = JetStreamEventStore(bus.nc, bus.js, bus.subjects)
        store.batched = False
        yield store


_sessions = itertools.count(1)


def session() -> str:
    return f"store-{next(_sessions)}"


async def test_append_returns_growing_sequences_and_reads_back_in_order(store) -> None:
    s = session()
    events = [ev(s) for _ in range(5)]
    seqs = await store.append(s, events)
    assert seqs == sorted(seqs) and len(set(seqs)) == 5
    stored = await store.read_session(s)
    assert [x.event for x in stored] == events
    assert [x.seq for x in stored] == seqs
    assert await store.last_seq(s) == seqs[-1]


async def test_sessions_are_kept_apart(store) -> None:
    a, b = session(), session()
    await store.append(a, [ev(a), ev(a)])
    await store.append(b, [ev(b)])
    await store.append(a, [ev(a)])
    assert len(await store.read_session(a)) == 3
    assert len(await store.read_session(b)) == 1
    assert await store.read_session(session()) == []
    assert await store.last_seq(session()) == 0


async def test_the_extent_is_a_sessions_last_sequence_and_how_many_events_it_has(store) -> None:
    s, other = session(), session()
    assert await store.extent(s) == (0, 0)
    seqs = await store.append(s, [ev(s), ev(s)])
    await store.append(other, [ev(other)])
    last = await store.append(s, [ev(s)])
    assert await store.extent(s) == (last[-1], 3) and seqs[-1] < last[-1]
    # read as `latest` reads, with the extent asked first
    read = await store.read_session(s, latest=True, extent=await store.extent(s))
    assert [x.seq for x in read] == [*seqs, *last]


async def test_read_after_returns_only_the_tail(store) -> None:
    s = session()
    seqs = await store.append(s, [ev(s) for _ in range(4)])
    tail = await store.read_session(s, after_seq=seqs[1])
    assert [x.seq for x in tail] == seqs[2:]


async def test_a_decision_is_appended_on_the_current_last_sequence(store) -> None:
    s = session()
    first = await store.append_decision(s, [ev(s)], expected_last_seq=0)
    decided = [ev(s) for _ in range(6)]
    last = await store.append_decision(s, decided, expected_last_seq=first)
    stored = await store.read_session(s)
    assert [x.event for x in stored[1:]] == decided
    assert last == stored[-1].seq == await store.last_seq(s)


async def test_a_stale_decision_raises_a_conflict_and_appends_nothing(store) -> None:
    s = session()
    first = await store.append(s, [ev(s)])
    await store.append(s, [ev(s)])  # someone else moved the session on
    for size in (1, 3):
        with pytest.raises(AppendConflict):
            await store.append_decision(
                s, [ev(s) for _ in range(size)], expected_last_seq=first[-1]
            )
    assert len(await store.read_session(s)) == 2


async def test_a_plain_subscriber_also_hears_a_refused_decision(bus: Bus) -> None:
    """Why the HTTP face (and the contract's advice) reads the log with a consumer: core
    NATS routes a refused append's messages to plain subscribers all the same."""
    s = session()
    heard: list[str] = []
    all_four = asyncio.Event()

    async def on_msg(msg: object) -> None:
        heard.append(getattr(msg, "subject", ""))
        if len(heard) == 4:
            all_four.set()

    sub = await bus.nc.subscribe(bus.subjects.log_session(s), cb=on_msg)
    try:
        first = await bus.store.append(s, [ev(s)])
        await bus.store.append(s, [ev(s)])
        with pytest.raises(AppendConflict):
            await bus.store.append_decision(s, [ev(s), ev(s)], expected_last_seq=first[-1])
        async with asyncio.timeout(5):
            await all_four.wait()
    finally:
        await sub.unsubscribe()
    assert len(await bus.store.read_session(s)) == 2  # the log: the two appends only
    assert len(heard) == 4  # the subscriber: those, and the refused decision's two


async def test_new_session_must_be_empty_for_expected_zero(store) -> None:
    s = session()
    await store.append(s, [ev(s)])
    with pytest.raises(AppendConflict):
        await store.append_decision(s, [ev(s)], expected_last_seq=0)


async def test_a_decision_refused_midway_leaves_a_prefix_of_it(bus: Bus) -> None:
    """Fast-ingest batches end at a refused message: the log never skips one."""
    s = session()
    big = ev(s).model_copy(update={"source": "x" * (bus.nc.max_payload // 2)})
    decision = [ev(s), ev(s), big, ev(s)]  # the third is over the limit set below
    store = JetStreamEventStore(bus.nc, bus.js, bus.subjects)
    config = (await bus.js.stream_info(bus.subjects.log_stream)).config
    limit = config.max_msg_size
    config.max_msg_size = bus.nc.max_payload // 4
    await bus.js.update_stream(config=config)
    try:
        with pytest.raises(AppendError) as refused:
            await store.append_decision(s, decision, expected_last_seq=0)
    finally:
        config.max_msg_size = limit
        await bus.js.update_stream(config=config)
    assert store.batched and refused.value.index == 3
    assert [x.event for x in await bus.store.read_session(s)] == decision[:2]


async def test_an_event_appended_twice_is_stored_once(store) -> None:
    s = session()
    event = ev(s)
    first = await store.append(s, [event])
    again = await store.append(s, [event])
    assert first == again
    assert len(await store.read_session(s)) == 1


async def test_append_facts_spans_sessions_in_order(store) -> None:
    a, b = session(), session()
    events = [ev(a), ev(b), ev(a)]
    seqs = await store.append_facts(events)
    assert seqs == sorted(seqs)
    everything = await store.read_all(after_seq=seqs[0] - 1)
    assert [x.event for x in everything][:3] == events


async def test_read_kind_returns_every_event_of_a_kind_since_a_time(bus: Bus) -> None:
    from datetime import timedelta

    from turnstream.core.events import SessionTurnStart

    store = bus.store
    s = session()
    before = T0 - timedelta(days=1)
    ends = [ev(s) for _ in range(5)]
    await store.append_facts(ends)
    for _ in range(20):  # read straight after the appends, again and again: no race
        found = await store.read_kind("SessionTurnEnd", since=before)
        assert {e.event.id for e in found} >= {e.id for e in ends}
    assert await store.read_kind(SessionTurnStart.model_fields["type"].default, since=before) == []


async def test_subject_counts_come_from_the_servers_index_per_session(bus: Bus) -> None:
    from turnstream.bus.scan import subject_counts

    a, b = session(), session()
    await bus.store.append_facts([ev(a), ev(a), ev(b)])
    subjects = bus.subjects
    counts = await subject_counts(bus.nc, subjects.log_stream, subjects.log_kind("SessionTurnEnd"))
    assert counts[subjects.log(a, "SessionTurnEnd")] == 2
    assert counts[subjects.log(b, "SessionTurnEnd")] == 1
    assert subjects.session_from_log(subjects.log(a, "SessionTurnEnd")) == a
    assert await subject_counts(bus.nc, subjects.log_stream, subjects.log_kind("Nothing")) == {}


async def test_a_scan_up_to_a_sequence_stops_at_the_last_message_on_it_before(bus: Bus) -> None:
    from turnstream.bus.scan import scan_log

    a, b = session(), session()
    seqs = await bus.store.append_facts([ev(a), ev(b), ev(a), ev(b), ev(a)])
    subjects = bus.subjects
    seen: list[int] = []
    only_a = subjects.log_session(a)

    def on_event(seq: int, _subject: str, _data: bytes) -> None:
        seen.append(seq)

    handed = await scan_log(bus.js, subjects, on_event, subject=only_a, until_seq=seqs[3])
    assert seen == [seqs[0], seqs[2]] and handed == seqs[2]  # seqs[3] is b's: not handed
    seen.clear()
    after = await scan_log(bus.js, subjects, on_event, subject=only_a, after_seq=seqs[0])
    assert seen == [seqs[2], seqs[4]] and after == seqs[4]


async def test_subject_counts_read_every_page_of_a_large_answer(bus: Bus) -> None:
    """The server answers at most 100,000 subjects at a time."""
    from nats.js import api

    from turnstream.bus.scan import subject_counts

    await bus.js.add_stream(
        api.StreamConfig(name="PAGES", subjects=["pages.>"], storage=api.StorageType.MEMORY)
    )
    try:
        for i in range(100_300):
            await bus.nc.publish(f"pages.s{i}.K", b"x")
            if i % 5000 == 0:
                await bus.nc.flush()
        await bus.nc.flush()
        for _ in range(50):  # the stream stores what core NATS delivered, a moment later
            if (await bus.js.stream_info("PAGES")).state.messages == 100_300:
                break
            await asyncio.sleep(0.1)
        counts = await subject_counts(bus.nc, "PAGES", "pages.*.K")
        assert len(counts) == 100_300 and set(counts.values()) == {1}
    finally:
        await bus.js.delete_stream("PAGES")


async def test_a_log_that_stops_taking_batches_gets_the_pipelined_path(bus: Bus) -> None:
    s = session()
    store = JetStreamEventStore(bus.nc, bus.js, bus.subjects)
    store.batched = True  # learnt before the stream was changed
    config = (await bus.js.stream_info(bus.subjects.log_stream)).config
    config.allow_batched = False
    await bus.js.update_stream(config=config)
    try:
        decided = [ev(s) for _ in range(3)]
        last = await store.append_decision(s, decided, expected_last_seq=0)
    finally:
        config.allow_batched = True
        await bus.js.update_stream(config=config)
    assert store.batched is False
    assert [x.event for x in await bus.store.read_session(s)] == decided
    assert last == await bus.store.last_seq(s)
