"""One process-wide feed of the log and the live tokens, fanned out in memory.

Every open SSE stream and every waiting `POST` would otherwise hold a NATS consumer or
subscription of its own. The hub holds two for the whole process, whatever the number of
streams: one ordered push consumer on `<prefix>.log.>` (ephemeral, flow-controlled; it
carries each event's stream sequence, which core NATS does not) and one core
subscription on `<prefix>.live.>`. Each `Feed` is an in-memory queue of one session's
items; the hub routes by the session token of the subject and reads no event it does not
route. It subscribes when the first feed opens, not at startup: an HTTP face nobody uses
(say under `turnstream up`) costs the server no delivery of every event.

```
NATS ──ordered consumer──► Hub ──by session──► Feed (queue) ──► SSE stream / POST waiter
     ──core sub (live)───►
```
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from nats.js import api
from nats.js.errors import NotFoundError

from turnstream.bus import Bus
from turnstream.bus.scan import stream_seq
from turnstream.http.direct import DirectGets, LogRecord
from turnstream.http.problems import Problem

log = logging.getLogger("turnstream.http")
FEED_LIMIT = 10_000
"""Items a feed may hold before its reader is too slow: the feed is closed (a client
resumes with `Last-Event-ID`), memory stays bounded."""


@dataclass(frozen=True, slots=True)
class TokenItem:
    data: bytes


class Closed(Exception):
    """The feed ended: the app is shutting down, or its reader fell too far behind."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(eq=False)
class Feed:
    """One session's events (and tokens, if asked) as they arrive."""

    session_id: str
    tokens: bool = False
    kinds: frozenset[str] | None = None
    """Only these event types (None: all): a waiting POST wakes for its verdict and its
    turn's end, not for each of the turn's dozen other events."""
    queue: asyncio.Queue[LogRecord | TokenItem | Closed] = field(
        default_factory=lambda: asyncio.Queue(FEED_LIMIT + 1)
    )
    closed: bool = False

    def put(self, item: LogRecord | TokenItem | Closed) -> None:
        if self.closed:
            return
        if isinstance(item, Closed):
            self.closed = True
        elif self.queue.qsize() >= FEED_LIMIT:
            self.closed = True
            item = Closed(f"reader fell {FEED_LIMIT} items behind; resume with Last-Event-ID")
        self.queue.put_nowait(item)

    async def get(self, timeout: float | None = None) -> LogRecord | TokenItem | None:
        """The next item; `None` after `timeout` seconds without one; `Closed` raised."""
        try:
            item = self.queue.get_nowait()  # the common case under load: no timer at all
        except asyncio.QueueEmpty:
            if timeout is None:
                item = await self.queue.get()
            else:
                try:
                    async with asyncio.timeout(timeout):
                        item = await self.queue.get()
                except TimeoutError:
                    return None
        if isinstance(item, Closed):
            raise item
        return item


class Hub:
    """Routes the log and the live tokens to the feeds of their sessions."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.feeds: dict[str, set[Feed]] = {}
        self._subs: list[Any] = []
        self._closing = False
        self._starting = asyncio.Lock()
        self.direct = DirectGets(bus)
        """Pages of a session's log (replays, `/events`, A2A, an answer's prompt check, a
        retried POST) on one shared inbox."""
        self.log_replicas = 0
        """The log stream's replicas, read when the hub subscribes (0 before)."""

    async def start(self) -> None:
        """Subscribe (once); every event appended after this returns reaches the hub.
        A 503 problem while the log stream does not exist (the services create it)."""
        async with self._starting:
            if not self._subs:
                try:
                    await self._subscribe()
                except NotFoundError:
                    raise Problem(
                        503,
                        "not_ready",
                        "Not ready",
                        f"stream {self.bus.subjects.log_stream} does not exist yet: the "
                        "services create it when they start (turnstream up)",
                    ) from None

    async def _subscribe(self) -> None:
        subjects = self.bus.subjects
        info = await self.bus.js.stream_info(subjects.log_stream)
        self.log_replicas = int(info.config.num_replicas or 1)
        prefix_len = len(subjects.prefix) + 5  # "<prefix>.log."

        async def on_log(msg: Any) -> None:
            subject: str = msg.subject
            dot = subject.rindex(".")
            feeds = self.feeds.get(subject[prefix_len:dot])
            if feeds:
                kind = subject[dot + 1 :]
                item = LogRecord(stream_seq(msg), kind, msg.data)
                for feed in list(feeds):
                    if feed.kinds is None or kind in feed.kinds:
                        feed.put(item)

        live_len = len(subjects.prefix) + 6  # "<prefix>.live."

        async def on_live(msg: Any) -> None:
            subject: str = msg.subject
            feeds = self.feeds.get(subject[live_len : subject.rindex(".")])
            if feeds:
                item = TokenItem(msg.data)
                for feed in list(feeds):
                    if feed.tokens:
                        feed.put(item)

        self._subs.append(
            await self.bus.js.subscribe(
                subjects.log_all,
                stream=subjects.log_stream,
                cb=on_log,
                ordered_consumer=True,
                config=api.ConsumerConfig(deliver_policy=api.DeliverPolicy.NEW),
                pending_msgs_limit=1_000_000,
                pending_bytes_limit=512 * 1024 * 1024,
            )
        )
        self._subs.append(
            await self.bus.nc.subscribe(
                f"{subjects.prefix}.live.>",
                cb=on_live,
                pending_msgs_limit=1_000_000,
                pending_bytes_limit=256 * 1024 * 1024,
            )
        )
        # the consumer exists on the server from here on: every event appended after
        # this point reaches the hub, which is what the replay/live seam relies on
        log.info("hub following %s and %s.live.>", subjects.log_all, subjects.prefix)

    @contextlib.asynccontextmanager
    async def feed(
        self, session_id: str, *, tokens: bool = False, kinds: frozenset[str] | None = None
    ) -> AsyncIterator[Feed]:
        """A feed of `session_id` (of the event types `kinds` only, if given), registered
        for as long as the block runs."""
        if not self._subs:
            await self.start()
        feed = Feed(session_id, tokens, kinds)
        if self._closing:
            feed.put(Closed("the server is shutting down"))
        self.feeds.setdefault(session_id, set()).add(feed)
        try:
            yield feed
        finally:
            feeds = self.feeds.get(session_id)
            if feeds is not None:
                feeds.discard(feed)
                if not feeds:
                    del self.feeds[session_id]

    @property
    def started(self) -> bool:
        return bool(self._subs)

    @property
    def open_feeds(self) -> int:
        return sum(len(f) for f in self.feeds.values())

    def close_feeds(self, reason: str = "the server is shutting down") -> None:
        """End every open feed (their streams finish; clients resume elsewhere)."""
        self._closing = True
        for feeds in list(self.feeds.values()):
            for feed in list(feeds):
                feed.put(Closed(reason))

    async def stop(self) -> None:
        self.close_feeds()
        await self.direct.stop()
        async with self._starting:
            for sub in self._subs:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
            self._subs.clear()
