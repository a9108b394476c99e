"""Process-wide feeds of the log and the live tokens, fanned out in memory.

Every open SSE stream and every waiting `POST` would otherwise hold a NATS consumer or
subscription of its own. The hub holds a few for the whole process, whatever the number
of streams: an ordered push consumer on `<prefix>.log.>` for the feeds that read every
event (streams; ephemeral, flow-controlled; it carries each event's stream sequence,
which core NATS does not), one filtered to the few event types a waiting `POST` reads,
and one core subscription on `<prefix>.live.>` for the token deltas. Each `Feed` is an
in-memory queue of one session's items; the hub routes by the session token of the
subject and reads no event it does not route.

Each source is created when its first feed opens and let go `LINGER_S` after its last
one closed: an HTTP face that only answers `POST`s is not sent every event of the
deployment (a dozen a turn), and one nobody uses costs the server nothing.

```
NATS ──ordered consumer (all)──────► Hub ──by session──► Feed (queue) ──► SSE stream
     ──ordered consumer (verdicts, ends)─►                             ──► POST waiter
     ──core sub (live)──────────────►
```
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from turnstream.bus import Bus
from turnstream.bus.consume import Subscriptions
from turnstream.bus.errors import NotFound
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


LINGER_S = 30.0
"""A source whose last feed closed is kept this long: the next stream or POST soon after
finds it running, and a steady trickle of requests does not create a consumer each."""

Kinds = frozenset[str] | None
"""The event types a source carries and its feeds read (None: all)."""


class Hub:
    """Routes the log and the live tokens to the feeds of their sessions."""

    def __init__(self, bus: Bus, *, linger_s: float = LINGER_S) -> None:
        self.bus = bus
        self.linger_s = linger_s
        self.feeds: dict[str, set[Feed]] = {}
        self._sources: dict[Kinds | str, Any] = {}
        """The subscription of each source running: by the kinds it carries, `LIVE` for
        the token deltas."""
        self._users: dict[Kinds | str, int] = {}
        """Open feeds by the source they need."""
        self._retiring: dict[Kinds | str, asyncio.TimerHandle] = {}
        self._closing = False
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self.direct = DirectGets(bus)
        """Pages of a session's log (replays, `/events`, A2A, an answer's prompt check, a
        retried POST) on one shared inbox."""
        self.log_replicas = 0
        """The log stream's replicas, read when a source first subscribes (0 before)."""

    async def start(self, kinds: Kinds = None, *, tokens: bool = False) -> None:
        """Have the source of `kinds` (and the live tokens, if asked) running; every event
        appended after this returns reaches it. A 503 problem while the log stream does
        not exist (the services create it)."""
        if kinds in self._sources and (LIVE in self._sources or not tokens):
            return
        async with self._lock:
            try:
                if kinds not in self._sources:
                    self._sources[kinds] = await self._subscribe(kinds)
                    self._idle(kinds)  # started ahead of any feed (a stream's early 503)
            except NotFound:
                raise Problem(
                    503,
                    "not_ready",
                    "Not ready",
                    f"stream {self.bus.subjects.log_stream_at(0)} does not exist yet: the "
                    "services create it when they start (turnstream up)",
                ) from None
            if tokens and LIVE not in self._sources:
                self._sources[LIVE] = await self._subscribe_live()
                self._idle(LIVE)

    async def _subscribe(self, kinds: Kinds) -> Subscriptions:
        """An ordered consumer of `kinds` on each log stream (one, or one a partition)."""
        subjects = self.bus.subjects
        if not self.log_replicas:
            info = await self.bus.stream_info(subjects.log_stream_at(0))
            self.log_replicas = int(info.config.num_replicas or 1)

        async def on_log(msg: Any) -> None:
            subject: str = msg.subject
            feeds = self.feeds.get(subjects.session_from_log(subject))
            if feeds:
                item = LogRecord(stream_seq(msg), subjects.type_from_log(subject), msg.data)
                for feed in list(feeds):
                    if feed.kinds == kinds:
                        feed.put(item)

        subs = Subscriptions()
        try:
            filtered = None if kinds is None else sorted(subjects.log_kind(k) for k in kinds)
            for stream in subjects.log_streams:
                subs.append(
                    await self.bus.follow(
                        stream,
                        on_log,
                        subject=subjects.log_all if kinds is None else None,
                        filter_subjects=filtered,
                        pending_msgs_limit=1_000_000,
                        pending_bytes_limit=512 * 1024 * 1024,
                    )
                )
        except BaseException:
            await subs.unsubscribe()
            raise
        # the consumers exist on the server from here on: every event appended after
        # this point reaches the hub, which is what the replay/live seam relies on
        log.info("hub following %s", "every event" if kinds is None else sorted(kinds))
        return subs

    async def _subscribe_live(self) -> Any:
        subjects = self.bus.subjects
        live_len = len(subjects.prefix) + 6  # "<prefix>.live."

        async def on_live(msg: Any) -> None:
            subject: str = msg.subject
            feeds = self.feeds.get(subject[live_len : subject.rindex(".")])
            if feeds:
                item = TokenItem(msg.data)
                for feed in list(feeds):
                    if feed.tokens:
                        feed.put(item)

        sub = await self.bus.nc.subscribe(
            f"{subjects.prefix}.live.>",
            cb=on_live,
            pending_msgs_limit=1_000_000,
            pending_bytes_limit=256 * 1024 * 1024,
        )
        await self.bus.nc.flush()  # the server has the interest: no token after this is missed
        return sub

    @contextlib.asynccontextmanager
    async def feed(
        self, session_id: str, *, tokens: bool = False, kinds: frozenset[str] | None = None
    ) -> AsyncIterator[Feed]:
        """A feed of `session_id` (of the event types `kinds` only, if given), registered
        for as long as the block runs."""
        feed = Feed(session_id, tokens, kinds)
        if self._closing:
            feed.put(Closed("the server is shutting down"))
        # in use before the await: a source retiring meanwhile sees it and stays
        needs: list[Kinds | str] = [kinds, LIVE] if tokens else [kinds]
        for need in needs:
            self._use(need)
        self.feeds.setdefault(session_id, set()).add(feed)
        try:
            await self.start(kinds, tokens=tokens)
            yield feed
        finally:
            feeds = self.feeds.get(session_id)
            if feeds is not None:
                feeds.discard(feed)
                if not feeds:
                    del self.feeds[session_id]
            for need in needs:
                self._release(need)

    def _use(self, need: Kinds | str) -> None:
        self._users[need] = self._users.get(need, 0) + 1
        timer = self._retiring.pop(need, None)
        if timer is not None:
            timer.cancel()

    def _release(self, need: Kinds | str) -> None:
        self._users[need] -= 1
        self._idle(need)

    def _idle(self, need: Kinds | str) -> None:
        """With no feed needing it, the source is let go after `linger_s`."""
        if self._users.get(need, 0) == 0 and need not in self._retiring and not self._closing:
            loop = asyncio.get_running_loop()
            self._retiring[need] = loop.call_later(self.linger_s, self._retire_soon, need)

    def _retire_soon(self, need: Kinds | str) -> None:
        self._retiring.pop(need, None)
        task = asyncio.create_task(self._retire(need))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _retire(self, need: Kinds | str) -> None:
        """Let the source go if still no feed needs it (one may have opened meanwhile)."""
        async with self._lock:
            if self._users.get(need, 0) > 0:
                return
            sub = self._sources.pop(need, None)
            if sub is not None:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
                log.info("hub let go of %s: no feed for %.0f s", need, self.linger_s)

    @property
    def started(self) -> bool:
        """The source of every event is running (what a stream reads)."""
        return None in self._sources

    @property
    def following(self) -> list[str]:
        """What the hub follows now: "every event" and/or the types a waiting POST reads,
        and "live tokens" (`/readyz` shows it)."""
        return sorted(_name(source) for source in self._sources)

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
        for timer in self._retiring.values():
            timer.cancel()
        self._retiring.clear()
        for task in list(self._tasks):
            task.cancel()
        await self.direct.stop()
        async with self._lock:
            subs = list(self._sources.values())
            self._sources.clear()
            for sub in subs:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()


LIVE = "live"
"""The source of token deltas (a core subscription on `<prefix>.live.>`)."""


def _name(source: Kinds | str) -> str:
    if source is None:
        return "every event"
    if isinstance(source, str):
        return "live tokens"
    return ", ".join(sorted(source))
