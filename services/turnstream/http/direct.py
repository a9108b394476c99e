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
        self, session_id: str, *, after: int, limit: int, kind: str | None = None
    ) -> tuple[list[LogRecord], int]:
        """Up to `limit` (≤ 1000) of the session's events (of type `kind` only, if given)
        after `after`, and how many more there were after them when the server answered."""
        subjects = self.bus.subjects
        out: list[LogRecord] = []

        def add(seq: int, subject: str, data: bytes) -> None:
            out.append(LogRecord(seq, subjects.type_from_log(subject), data))

        pending = await self.reads.batch(
            subjects.log_stream_of(session_id),
            subjects.log(session_id, kind) if kind else subjects.log_session(session_id),
            add,
            after_seq=after,
            batch=max(1, min(limit, MAX_BATCH)),
        )
        return out, pending

    async def records(
        self, session_id: str, *, after: int, limit: int = DIRECT_BATCH, kind: str | None = None
    ) -> AsyncIterator[LogRecord]:
        """The session's events (of type `kind` only, if given) after `after`, `limit` a
        page, until a page says there are no more (the end the answering server knows of)."""
        while True:
            page, more = await self.page(session_id, after=after, limit=limit, kind=kind)
            for record in page:
                yield record
            if not more or not page:
                return
            after = page[-1].seq

    async def stop(self) -> None:
        await self.reads.close()
