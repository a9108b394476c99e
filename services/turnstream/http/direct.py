"""Pages of one session's log by batched direct get (ADR-31): no consumer at all.

`$JS.API.DIRECT.GET.<log stream>` with `{"seq", "next_by_subj", "batch"}` answers with up
to `batch` messages of the subject from `seq` on, then an end-of-batch status (204) that
says how many more there are; 404 when there is none. The log stream allows direct gets
(`allow_direct`, bus/streams.py). Replays and `/events` pages use it, so a thousand
clients resuming at once cost the server no consumer state (an ordered consumer per
replay would linger until its inactivity threshold). `DirectGets` answers them all
through `bus.scan.DirectReads` (one inbox subscription, a reply subject per request, as
the event store's session reads), so a replay costs one request and no
subscribe/unsubscribe.

A batch asking for more than remain costs the server the rest of the stream
(`DirectReads.read`): a page from the start asks for no more than the session has (its
count, `log_count`), and each next page of `records` for no more than the last one said
were left.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import NamedTuple

from turnstream.bus import Bus
from turnstream.bus.scan import DIRECT_BATCH, DirectReads

MAX_BATCH = 1000


class LogRecord(NamedTuple):
    seq: int
    event_type: str
    data: bytes


class DirectGets:
    """Pages of sessions' logs for a whole process, through one `DirectReads`."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.reads = DirectReads(bus.nc)

    async def page(
        self,
        session_id: str,
        *,
        after: int,
        limit: int,
        kind: str | None = None,
        left: int | None = None,
    ) -> tuple[list[LogRecord], int]:
        """Up to `limit` (≤ 1000) of the session's events (of type `kind` only, if given)
        after `after`, and how many more there were after them when the server answered.
        `left`: how many there are after `after`, where known (from the start, they are
        counted first)."""
        subjects = self.bus.subjects
        out: list[LogRecord] = []

        def add(seq: int, subject: str, data: bytes) -> None:
            out.append(LogRecord(seq, subjects.type_from_log(subject), data))

        stream = subjects.log_stream_of(session_id)
        subject = subjects.log(session_id, kind) if kind else subjects.log_session(session_id)
        if left is None and after == 0:
            left = await self.bus.store.count(subject, stream=stream)
        size = max(1, min(limit, MAX_BATCH))
        if left is not None:
            if left <= 0:
                return out, 0
            size = min(size, left)
        pending = await self.reads.batch(stream, subject, add, after_seq=after, batch=size)
        return out, pending

    async def records(
        self, session_id: str, *, after: int, limit: int = DIRECT_BATCH, kind: str | None = None
    ) -> AsyncIterator[LogRecord]:
        """The session's events (of type `kind` only, if given) after `after`, `limit` a
        page, until a page says there are no more (the end the answering server knows of)."""
        left: int | None = None
        while True:
            page, left = await self.page(session_id, after=after, limit=limit, kind=kind, left=left)
            for record in page:
                yield record
            if not left or not page:
                return
            after = page[-1].seq

    async def stop(self) -> None:
        await self.reads.close()
