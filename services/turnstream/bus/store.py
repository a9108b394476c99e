"""The event store on JetStream: append to and read back the log (the contract it keeps:
`bus/contract.py`); also the log's scans and counts that the services need beside it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from nats.js import api
from nats.js.errors import NotFoundError

from turnstream.bus.appender import AppendError, PipelinedAppender
from turnstream.bus.contract import AppendConflict, Extent, StoredEvent
from turnstream.bus.ordered import ordered_subscribe
from turnstream.bus.scan import (
    DirectGetError,
    DirectReads,
    last_seq_of,
    log_count,
    log_last_seq,
    scan_log,
    stream_seq,
    subject_counts,
)
from turnstream.bus.tracing import msg_headers
from turnstream.core.events import Event, EventBase, decode, encode
from turnstream.core.subjects import Subjects

log = logging.getLogger("turnstream.bus")
WRONG_LAST_SEQUENCE = (10071, 10164)
"""JetStream's error codes for a failed expected-last-sequence condition."""
BATCHES_NOT_ENABLED = 10205
"""A fast-ingest batch sent to a stream without `allow_batched` (its first message)."""
BATCH_REFUSED = (BATCHES_NOT_ENABLED, 10211)
"""A fast-ingest batch refused whole: not enabled, or too many batches in flight."""
APPEND_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 30.0
READ_CONCURRENCY = 64
"""Session reads in flight at once per store (a restarted runner reloads them all)."""


DIRECT_RETRIES_S = (0.2, 1.0)
"""Pauses before a session's direct read that timed out is asked again, before it is read
through a consumer (which costs the server more, the last thing to add under load)."""


class JetStreamEventStore:
    """The log as the `<PREFIX>_LOG` stream, one subject per session and event kind."""

    def __init__(self, nc: Any, js: Any, subjects: Subjects) -> None:
        self.nc = nc
        self.js = js
        self.subjects = subjects
        self.appender = PipelinedAppender(nc)
        self.batched: bool | None = None
        """The log takes fast-ingest batches (found out on the first decision)."""
        self._reads = asyncio.Semaphore(READ_CONCURRENCY)
        self.direct = DirectReads(nc)
        """A session's reads, on one reply subscription for the whole store."""

    async def append(self, session_id: str, events: Sequence[EventBase]) -> list[int]:
        return await self.append_facts(events)

    async def append_decision(
        self, session_id: str, events: Sequence[EventBase], *, expected_last_seq: int
    ) -> int:
        if not events:
            raise ValueError("a decision appends at least one event")
        first = events[0]
        condition = {
            **msg_headers(first),
            "Nats-Expected-Last-Subject-Sequence": str(expected_last_seq),
            "Nats-Expected-Last-Subject-Sequence-Subject": self.subjects.log_session(session_id),
        }
        log = self.subjects.log
        items = [(log(session_id, first.type), encode(first), condition)]
        items += [(log(session_id, e.type), encode(e), msg_headers(e)) for e in events[1:]]
        batched = self.batched if self.batched is not None else await self._batched()
        try:
            if len(items) > 1 and batched:
                try:
                    return await self.appender.publish_batch(items, APPEND_TIMEOUT_S)
                except AppendError as exc:
                    if exc.err_code not in BATCH_REFUSED:
                        raise
                    # refused as a batch, nothing stored: this decision goes the other way
                    self.batched = exc.err_code != BATCHES_NOT_ENABLED
            # The first event carries the condition and is awaited alone: if it is refused,
            # none of the rest may be appended. Once it is in, the rest are pipelined.
            seqs = await self.appender.publish(items[:1], APPEND_TIMEOUT_S)
            if len(items) > 1:
                seqs = await self.appender.publish(items[1:], APPEND_TIMEOUT_S)
            return seqs[-1]
        except AppendError as exc:
            if exc.err_code in WRONG_LAST_SEQUENCE:
                raise AppendConflict(session_id, expected_last_seq, str(exc)) from exc
            raise

    async def _batched(self) -> bool:
        """Fast-ingest batches need nats-server 2.14 and the log's `allow_batched`: a
        server that does not know them would store every message of a batch whose
        first was refused."""
        version = self.nc.connected_server_version
        info = await self.js.stream_info(self.subjects.log_stream_at(0))
        self.batched = (version.major, version.minor) >= (2, 14) and bool(info.config.allow_batched)
        return self.batched

    async def append_facts(self, events: Sequence[EventBase]) -> list[int]:
        log = self.subjects.log
        items = [(log(e.session_id, e.type), encode(e), msg_headers(e)) for e in events]
        return await self.appender.publish(items, APPEND_TIMEOUT_S)

    async def last_seq(self, session_id: str) -> int:
        subjects = self.subjects
        stream = subjects.log_stream_of(session_id)
        return await last_seq_of(self.nc, stream, subjects.log_session(session_id))

    async def last_seq_on(self, subject: str | None = None, *, stream: str | None = None) -> int:
        """`scan.log_last_seq` on this store's log: the last sequence on `subject` (default
        the whole log) of `stream` (which may be left out when the log is one stream)."""
        return await log_last_seq(self.js, self.subjects, subject, stream=stream)

    async def count(self, subject: str, *, stream: str) -> int:
        """`scan.log_count`: how many events of `stream` are on `subject`."""
        return await log_count(self.js, self.subjects, subject, stream=stream)

    async def scan(
        self,
        on_event: Callable[[int, str, bytes], None],
        *,
        after_seq: int = 0,
        subject: str | None = None,
        stream: str | None = None,
        until_seq: int | None = None,
    ) -> int:
        """`scan.scan_log` of this store's log: every event after `after_seq` (on `subject`)
        up to the last one now (or `until_seq`), to `on_event(seq, subject, data)`; the
        last sequence."""
        return await scan_log(
            self.js,
            self.subjects,
            on_event,
            after_seq=after_seq,
            subject=subject,
            stream=stream,
            until_seq=until_seq,
        )

    async def read_session(
        self,
        session_id: str,
        *,
        after_seq: int = 0,
        known: Mapping[int, Event] | None = None,
        at_least: int = 0,
        latest: bool = False,
        events_before: int | None = None,
        extent: Extent | None = None,
    ) -> list[StoredEvent]:
        stream = self.subjects.log_stream_of(session_id)
        subject = self.subjects.log_session(session_id)
        counted = events_before is not None or after_seq == 0  # the count is worth asking
        count = None
        if latest and extent is None:  # a replica behind the leader may answer the read (R3)
            if counted:
                extent = await self.extent(session_id)
            else:
                at_least = max(at_least, await self.last_seq(session_id))
        if extent is not None:
            at_least, count = max(at_least, extent.last), extent.events
        elif counted:  # as a reload's read
            count = await log_count(self.js, self.subjects, subject, stream=stream)
        expected = count - (events_before or 0) if counted and count is not None else None
        return await self._read(stream, subject, after_seq, known or {}, at_least, expected)

    async def extent(self, session_id: str) -> Extent:
        stream = self.subjects.log_stream_of(session_id)
        subject = self.subjects.log_session(session_id)
        last, counts = await asyncio.gather(
            last_seq_of(self.nc, stream, subject), subject_counts(self.nc, stream, subject)
        )
        return Extent(last, sum(counts.values()))

    async def last_of_kind(self, session_id: str, event_type: str) -> Event | None:
        """The session's last event of one kind, asked of the stream's leader (one request);
        None when it has none."""
        stream = self.subjects.log_stream_of(session_id)
        try:
            msg = await self.js.get_last_msg(stream, self.subjects.log(session_id, event_type))
        except NotFoundError:
            return None
        return decode(msg.data)

    async def read_kind_of(self, session_id: str, event_type: str) -> list[StoredEvent]:
        """The session's events of one kind, in order, up to its last one on the stream's
        leader: one request when there is none, else that and a direct read of them."""
        stream = self.subjects.log_stream_of(session_id)
        subject = self.subjects.log(session_id, event_type)
        last = await log_last_seq(self.js, self.subjects, subject, stream=stream)
        if last == 0:
            return []
        return await self._read(stream, subject, 0, {}, last)

    async def read_all(self, *, after_seq: int = 0) -> list[StoredEvent]:
        """On a partitioned log: partition after partition, each in order (sequences are
        per partition, so `after_seq` cannot be asked of all of them)."""
        if self.subjects.partitioned and after_seq:
            raise ValueError("read_all(after_seq=…) of a partitioned log: read a partition")
        out: list[StoredEvent] = []
        for stream in self.subjects.log_streams:
            out += await self._read(stream, self.subjects.log_all, after_seq, {}, 0)
        return out

    async def read_kind(self, event_type: str, *, since: datetime) -> list[StoredEvent]:
        """Partition after partition on a partitioned log."""
        out: list[StoredEvent] = []
        for stream in self.subjects.log_streams:
            config = api.ConsumerConfig(
                deliver_policy=api.DeliverPolicy.BY_START_TIME,
                opt_start_time=since.astimezone(UTC),
            )
            out += await self._consume(stream, self.subjects.log_kind(event_type), config)
        return out

    async def _read(
        self,
        stream: str,
        subject: str,
        after_seq: int,
        known: Mapping[int, Event],
        at_least: int,
        expected: int | None = None,
    ) -> list[StoredEvent]:
        """From `after_seq + 1` up to the last event that exists now, and at least up to
        the last `known` one and `at_least`; `expected`: how many events that is, where
        the caller counted them (the server is asked for exactly that many; none at all
        when they are the `known` ones).

        A session is read with batched direct gets (no consumer: nats-server caps a
        stream's consumers, and a runner reloading 1,500 sessions at once went past it);
        the whole log, which may be long, with one ordered consumer (`scan_log`)."""
        out: list[StoredEvent] = []

        def keep(seq: int, _subject: str, data: bytes) -> None:
            event = known.get(seq)
            out.append(StoredEvent(seq, decode(data) if event is None else event))

        floor = max(max(known, default=0), at_least)
        if after_seq == 0 and expected == len(known) and max(known, default=0) >= floor:
            # counted on the leader from the session's start, the events known are all it
            # has (say a new session's first, delivered): nothing to read. From a snapshot
            # on it is not so sure: a log trimmed before the snapshot (archived, aged out)
            # could make the sum come out right with an unknown event in between.
            return [StoredEvent(seq, known[seq]) for seq in sorted(known)]

        async def scan() -> None:
            await scan_log(
                self.js,
                self.subjects,
                keep,
                after_seq=after_seq,
                subject=subject,
                stream=stream,
                at_least=floor,
            )

        if subject == self.subjects.log_all:
            await scan()
            return out
        async with self._reads:
            if await self._direct(stream, subject, keep, out, after_seq, expected, floor):
                return out
            out.clear()
            await scan()  # up to the leader's last sequence
        return out

    async def _direct(
        self,
        stream: str,
        subject: str,
        keep: Callable[[int, str, bytes], None],
        out: list[StoredEvent],
        after_seq: int,
        expected: int | None,
        floor: int,
    ) -> bool:
        """A session's read with batched direct gets into `out`, asked again while the
        server is too busy to answer; False: read it with a consumer instead."""
        for retry_s in (*DIRECT_RETRIES_S, None):
            try:
                last = await self.direct.read(
                    stream, subject, keep, after_seq=after_seq, count=expected
                )
                if last >= floor:
                    return True
                # a direct get may be answered by a replica that has not applied the latest
                # appends yet (R3): the read missed what the caller knows is there
                log.info("direct read of %s ended at %d, behind %d", subject, last, floor)
                return False
            except TimeoutError as exc:
                out.clear()
                if retry_s is None:  # the server stays too busy to answer it
                    log.warning("direct read of %s timed out (%r); with a consumer", subject, exc)
                    return False
                # a busy server: the same cheap read again, not a consumer per session
                log.info("direct read of %s timed out; again in %.1f s", subject, retry_s)
                await asyncio.sleep(retry_s)
            except DirectGetError as exc:
                # an error status (say 503: a log without `allow_direct`): the slower way,
                # which costs a consumer, still works
                log.warning("direct read of %s failed (%r); reading with a consumer", subject, exc)
                return False
        return False

    async def _consume(
        self, stream: str, subject: str, config: api.ConsumerConfig
    ) -> list[StoredEvent]:
        """Read through an ordered push consumer until nothing is pending."""
        out: list[StoredEvent] = []
        done = asyncio.get_running_loop().create_future()

        async def on_msg(msg: Any) -> None:
            out.append(StoredEvent(stream_seq(msg), decode(msg.data)))
            if msg.metadata.num_pending == 0 and not done.done():
                done.set_result(None)

        sub = await ordered_subscribe(
            self.js,
            subject,
            stream=stream,
            cb=on_msg,
            config=config,
            pending_msgs_limit=1_000_000,
            pending_bytes_limit=1024 * 1024 * 1024,
        )
        try:
            # nothing pending and nothing sent means an empty read; anything sent (even
            # still on its way to the callback) ends with a message whose num_pending is 0
            info = await sub.consumer_info()
            if info.num_pending == 0 and info.delivered.consumer_seq == 0:
                return out
            async with asyncio.timeout(READ_TIMEOUT_S):
                await done
        finally:
            await sub.unsubscribe()
        return out
