"""Pages of one session's log by batched direct get (ADR-31): no consumer at all.

`$JS.API.DIRECT.GET.<log stream>` with `{"seq", "next_by_subj", "batch"}` answers with up
to `batch` messages of the subject from `seq` on, then an end-of-batch status (204) that
says how many more there are; 404 when there is none. The log stream allows direct gets
(`allow_direct`, bus/streams.py). Replays and `/events` pages use it, so a thousand
clients resuming at once cost the server no consumer state (an ordered consumer per
replay would linger until its inactivity threshold). `DirectGets` answers them all on one
inbox subscription (a reply subject per request), so a replay costs one request and no
subscribe/unsubscribe. The request and the reading of a batch are `bus.scan`'s; its
`direct_read` reads to the end on an inbox of its own (the event store's session reads).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any, NamedTuple

from turnstream.bus import Bus
from turnstream.bus.scan import DIRECT_BATCH, direct_batch, direct_request

MAX_BATCH = 1000


class LogRecord(NamedTuple):
    seq: int
    event_type: str
    data: bytes


class DirectGets:
    """Pages of sessions' logs for a whole process: one wildcard inbox subscription,
    subscribed on first use, routes each reply to its request by the last token of its
    subject."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self._prefix = ""
        self._sub: Any = None
        self._waiting: dict[str, asyncio.Queue[Any]] = {}
        self._ids = itertools.count()
        self._lock = asyncio.Lock()

    async def _start(self) -> None:
        async with self._lock:
            if self._sub is None:
                self._prefix = self.bus.nc.new_inbox()
                offset = len(self._prefix) + 1

                async def on_reply(msg: Any) -> None:
                    queue = self._waiting.get(msg.subject[offset:])
                    if queue is not None:
                        queue.put_nowait(msg)

                self._sub = await self.bus.nc.subscribe(f"{self._prefix}.*", cb=on_reply)

    async def page(
        self, session_id: str, *, after: int, limit: int, kind: str | None = None
    ) -> tuple[list[LogRecord], int]:
        """Up to `limit` (≤ 1000) of the session's events (of type `kind` only, if given)
        after `after`, and how many more there were after them when the server answered."""
        if self._sub is None:
            await self._start()
        token = str(next(self._ids))
        replies: asyncio.Queue[Any] = asyncio.Queue()
        self._waiting[token] = replies
        try:
            subjects = self.bus.subjects
            await self.bus.nc.publish(
                f"$JS.API.DIRECT.GET.{subjects.log_stream}",
                direct_request(
                    subjects.log(session_id, kind) if kind else subjects.log_session(session_id),
                    after,
                    max(1, min(limit, MAX_BATCH)),
                ),
                reply=f"{self._prefix}.{token}",
            )
            out: list[LogRecord] = []

            def add(seq: int, subject: str, data: bytes) -> None:
                out.append(LogRecord(seq, subject[subject.rindex(".") + 1 :], data))

            pending = await direct_batch(replies, add, f"the log of {session_id}")
            return out, pending
        finally:
            del self._waiting[token]

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
        if self._sub is not None:
            sub, self._sub = self._sub, None
            await sub.unsubscribe()
