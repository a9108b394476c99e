"""A2A push notifications delivered from the log: each change of a task with push configs
POSTed to each of its webhooks, once per update.

```
push bucket ─ KV watch ─► PushIndex (tasks with configs)      started before the consumer
log event (PUSHED_KINDS) ─► batch ─► barrier: index current to the bucket's last seq?
   ├─ its task has no config: ack (no KV read)
   └─ its task's queue ─► the task's push entry ─ folded into its view ─ no change: done
        └ change = an update (id: task, log sequence)
          └─ per config not yet sent it: POST ─ 2xx ─────────────► sent[config] = seq
                                               └ fails: wait, double, again … given up:
                                                 PushNotificationAbandoned ─► sent[config] = seq
```

The log is read through one durable consumer (`a2a-push`) shared by every HTTP replica,
`MAX_IN_FLIGHT` events at a time, and only while some task has a config: while none has
(the common case), nothing is fetched, and once a config comes the consumer is moved past
what no config needs (`_skip`), so a face without configs costs nothing per turn.
Events of tasks nobody set a config for (nearly all) are acknowledged at once, read only
as far as their task: which tasks have configs is known locally (`push_index`), and a
skip is trusted only once the index is current to the bucket's last sequence read after
the batch was fetched (one `STREAM.INFO` per batch, not a KV read per event): a config
written before its task's next event was appended is in it by then. Otherwise (the watch
lags past `BARRIER_WITHIN_S`) the event takes the old path, a KV read of its task's entry.

The others go to their task's queue: one worker per task with events in hand, so a task's
updates go out in log order while a slow or failing webhook holds up only its own task.
An event is acknowledged after the entry records what was sent. A restart of a replica or
of NATS resumes at the first event not acknowledged (a worker stopping naks its queue, in
order); an update a config was sent is skipped when its event comes again (`sent`). A
replica that dies between a 2xx and writing `sent` sends that update again: the receiver
tells it by its `updateId`. Several replicas share the consumer, so a task's later event
may be handled before an earlier one another replica holds: the task's events the entry
has not seen are read from the log and folded first (`unfolded`), so no update is lost or
sent out of order by one replica; two replicas sending at the same moment may both send
one (docs/http.md).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Any

import httpx
import orjson
from a2a.types.a2a_pb2 import StreamResponse, TaskStatusUpdateEvent
from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]

from turnstream.bus import Bus
from turnstream.bus.consume import InProgress, fetch_loop
from turnstream.bus.durables import A2A_PUSH_IN_FLIGHT, A2A_PUSH_KINDS, a2a_push
from turnstream.core.events import (
    Envelope,
    Event,
    InteractionAnswered,
    InteractionRequested,
    PushNotificationAbandoned,
    PushNotificationAbandonedData,
    decode,
    stamp,
)
from turnstream.core.ids import derived_id
from turnstream.http.a2a.mapping import status_update
from turnstream.http.a2a.push import (
    PushEntry,
    PushStore,
    allowed_url,
    due,
    headers_for,
    webhook_of,
)
from turnstream.http.a2a.push_consumer import bind_when_ready, skip_to, stopped_within
from turnstream.http.a2a.push_index import wanted
from turnstream.http.a2a.push_watch import ConfigWatch
from turnstream.http.egress import outside_client
from turnstream.settings import Settings

log = logging.getLogger("turnstream.http.push")
DURABLE = "a2a-push"  # bus.durables.a2a_push
PUSHED_KINDS = frozenset(A2A_PUSH_KINDS)
"""The kinds a task's state changes on: `TurnView`'s, but for the stage markers (a
one-tool turn has nine, and its `SessionTurnStart` makes it `working` first): the
consumer is not handed them."""


MAX_IN_FLIGHT = A2A_PUSH_IN_FLIGHT
"""Events in hand at once (the consumer's `max_ack_pending`), across every task's queue:
so many held by failing webhooks stall the rest until one is given up."""
BATCH = 256
Held = tuple[int, Event, Any, str | None, InProgress]
"""An event in a task's queue: its sequence, itself, its message, its task if known, and
the timer keeping it in progress while it waits (the ack wait is short)."""


class Stopped(Exception):
    """The process is stopping: the event is left unacknowledged for the next one."""


async def _settle(acknowledgement: Any) -> None:
    """Send an ack or nak; one lost (NATS away) means the event comes again after the
    consumer's ack wait, which `sent` makes harmless."""
    try:
        await acknowledgement
    except Exception as exc:
        log.warning("push delivery: acknowledgement lost (%s); the event comes again", exc)


class Pusher:
    """One per HTTP process; `run` until `stop`."""

    def __init__(self, bus: Bus, settings: Settings, store: PushStore, source: str) -> None:
        self.bus = bus
        self.settings = settings
        self.store = store
        self.source = source
        self._stop = asyncio.Event()
        self.watch = ConfigWatch(bus, store)
        self.bound = asyncio.Event()
        """Set once the durable consumer is bound (on every log stream): from then on no
        event a config needs is passed over (a consumer created new starts at the log's
        next event)."""
        self._bound: set[str] = set()
        self._idle: dict[str, bool] = {}
        """By log stream: no task had a config at its last fetch (or none was made yet)."""
        self._queues: dict[str, collections.deque[Held]] = {}
        self._workers = asyncio.TaskGroup()
        self.durable = a2a_push(settings.a2a_push_timeout_s)
        self.ack_wait_s = self.durable.ack_wait_s
        """An event in hand whose acknowledgement is lost (NATS restarting) comes again
        after this; each POST (bounded by its timeout) and each slice of a wait between
        tries is announced as in progress, so a slow webhook does not make it come again."""

    async def run(self, stop: asyncio.Event) -> None:
        """The configs' watch first, live before the consumer is bound (a skip needs it);
        then the consumer, its events handed to the tasks' workers (`_on_batch`)."""
        self._stop = stop
        async with (
            outside_client(allow_private=self.settings.a2a_push_allow_private) as self.http,
            asyncio.TaskGroup() as self._workers,
        ):
            self._workers.create_task(self.watch.follow(stop))
            while not stop.is_set() and not self.watch.live.is_set():
                await stopped_within(stop, 0.1)
            async with asyncio.TaskGroup() as partitions:  # one stream, or one a partition
                for stream in self.bus.subjects.log_streams:
                    partitions.create_task(self._deliver(stream, stop))

    async def _deliver(self, stream: str, stop: asyncio.Event) -> None:
        """Fetch the log stream `stream`'s events for the tasks' workers until `stop`."""
        self._idle[stream] = True

        async def ready() -> None:
            await self._ready(stream)

        while not stop.is_set():
            sub = await bind_when_ready(self.bus, self.durable, stream, stop)
            if sub is None:
                return
            self._bound.add(stream)
            if self._bound.issuperset(self.bus.subjects.log_streams):
                self.bound.set()
            self._idle[stream] = True  # bound again: a skip is considered before a fetch
            try:
                await fetch_loop(sub, stop, self._on_batch, batch=BATCH, ready=ready)
            except Exception:  # NATS gone mid-call: bind again, the log still has it
                log.exception("push delivery stopped; binding again")
                await stopped_within(stop, 1.0)

    async def _ready(self, stream: str) -> None:
        """Before a fetch: while no task has a config, wait for one (fetching nothing);
        when one comes, pass over what no config needs (`_skip`) first."""
        if self.watch.index.tasks and not self._idle[stream]:
            return
        self._idle[stream] = True
        await self.watch.configured(self._stop)
        if not self._stop.is_set():
            await self._skip(stream)
            self._idle[stream] = False

    async def _skip(self, stream: str) -> None:
        """Move the consumer on `stream` past the events no config needs: those appended
        before the index was last trusted (any config not in it was written later) and
        folded into the view of every task in it of this stream (each config's task was
        folded that far when it was set, or since). Not trusted: nothing is passed over."""
        subjects = self.bus.subjects
        last = int((await self.bus.stream_info(stream)).state.last_seq or 0)
        if not await self.watch.trusted():
            return
        entries = await asyncio.gather(*(self.store.get(t) for t in self.watch.index.tasks))
        views = [
            e.view.last_seq
            for e in entries
            if e is not None and e.configs and subjects.log_stream_of(e.view.session_id) == stream
        ]
        await skip_to(self.bus, stream, DURABLE, min([last, *views]) + 1)

    async def _on_batch(self, msgs: list[Any]) -> None:
        """Ack the events of tasks without configs (once the index is trusted for this
        batch: `ConfigWatch.trusted`), queue the rest per task, in log order."""
        trusted = await self.watch.trusted()
        for msg in msgs:
            if self._stop.is_set():
                await _settle(msg.nak())
                continue
            if trusted and self.watch.index.empty:  # no config anywhere: nothing to read
                await _settle(msg.ack())
                continue
            try:
                if trusted and not wanted(self.watch.index, orjson.loads(msg.data)):
                    await _settle(msg.ack())  # another task's: not decoded
                    continue
                event = decode(msg.data)
            except Exception:
                log.exception(
                    "push delivery: seq %d undecodable; skipped", msg.metadata.sequence.stream
                )
                await _settle(msg.ack())
                continue
            task = self.watch.index.task_of(event)
            if task is None and trusted:
                await _settle(msg.ack())  # an ack lost: it comes again, is skipped again
                continue
            # not trusted: the slow path, the entry read from KV (an answer's task too)
            key = task or event.turn_id or f"session:{event.session_id}"
            beat = InProgress([msg], self.ack_wait_s)
            self._enqueue(key, (msg.metadata.sequence.stream, event, msg, task, beat))

    def _enqueue(self, key: str, item: Held) -> None:
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = collections.deque()
            self._workers.create_task(self._work(key, queue))
        queue.append(item)

    async def _work(self, key: str, queue: collections.deque[Held]) -> None:
        """One task's events, one at a time, until its queue is empty; on stop the rest
        are nak'd, in order, for the next process."""
        try:
            while queue and not self._stop.is_set():
                seq, event, msg, task, beat = queue[0]
                try:
                    await self._handle_until_done(seq, event, msg, task)
                except Stopped:
                    break
                queue.popleft()
                beat.stop()
                await _settle(msg.ack_sync())
        finally:
            del self._queues[key]
            for held in queue:
                held[4].stop()
            while queue:
                await _settle(queue.popleft()[2].nak())

    async def _handle_until_done(self, seq: int, event: Event, msg: Any, task: str | None) -> None:
        """`handle`, again after a second while it fails (KV or NATS away): the task's
        later events wait, the other tasks' do not."""
        while True:
            try:
                await self.handle(seq, event, msg, task)
                return
            except Stopped:
                raise
            except Exception:
                log.exception("push delivery failed on seq %d; again", seq)
                if await self._pause(1.0, msg):
                    raise Stopped from None

    async def handle(self, seq: int, event: Event, msg: Any, task: str | None = None) -> None:
        """Fold the event at `seq` into its task's push entry (`task`, or the event's own,
        or its answer's as KV says), after any of the task's earlier events the entry has
        not seen (`unfolded`); send each update to each config not sent it yet."""
        task_id = task or event.turn_id
        if task is None and isinstance(event, InteractionAnswered):
            task_id = await self.store.task_of_interaction(event.data.interaction_id)
        if not task_id:
            return
        entry = await self.store.get(task_id)
        if entry is None or seq <= entry.view.last_seq:
            return
        for earlier_seq, earlier in await self.unfolded(entry, seq):
            await self._fold(entry, earlier_seq, earlier, msg)
        await self._fold(entry, seq, event, msg)

    async def unfolded(self, entry: PushEntry, seq: int) -> list[tuple[int, Event]]:
        """The session's events of `PUSHED_KINDS` between the entry's view and `seq`: one
        of the task's may be in another replica's hands (or skipped, its answer not yet
        known there), and is folded here first, in log order (its own delivery then finds
        it done). One direct read of the session; a single replica finds none that change
        the view (it folds them in order)."""
        stored = await self.bus.store.read_session(
            entry.view.session_id, after_seq=entry.view.last_seq
        )
        return [(s.seq, s.event) for s in stored if s.seq < seq and s.event.type in PUSHED_KINDS]

    async def _fold(self, entry: PushEntry, seq: int, event: Event, msg: Any) -> None:
        if not entry.view.feed(seq, event):
            return  # nothing a client sees changed (saved with the next update)
        task_id = entry.view.turn_id
        if isinstance(event, InteractionRequested):
            await self.store.note_interaction(event.data.interaction_id, task_id)
        update = status_update(entry.view, seq)
        entry.sent = {k: v for k, v in entry.sent.items() if k in entry.configs}
        saved = False
        for config_id in due(entry, seq):
            error = await self.deliver(entry, config_id, update, msg)
            if error is not None:
                await self.abandon(entry, config_id, seq, event, error)
            entry.sent[config_id] = max(seq, entry.sent.get(config_id, 0))
            await self.store.save_delivery(entry)  # after each: a crash resends no other
            saved = True
        if not saved:  # the view changed, nothing was due: it is kept all the same
            await self.store.save_delivery(entry)

    async def deliver(
        self, entry: PushEntry, config_id: str, update: TaskStatusUpdateEvent, msg: Any
    ) -> str | None:
        """POST `update` to the config's webhook, tried `a2a_push_attempts` times with a
        doubling wait; None when it took it, else the last error."""
        settings = self.settings
        config = entry.config(config_id)
        body = MessageToDict(StreamResponse(status_update=update))
        wait = settings.a2a_push_backoff_s
        error = ""
        for attempt in range(1, settings.a2a_push_attempts + 1):
            if not allowed_url(config.url, settings):
                return "refused: not an http(s) URL of a public address"
            await msg.in_progress()
            try:
                response = await self.http.post(
                    config.url,
                    json=body,
                    headers=headers_for(config),
                    timeout=settings.a2a_push_timeout_s,
                )
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"[:200]
            else:
                if response.is_success:
                    return None
                error = f"HTTP {response.status_code}"
            if attempt == settings.a2a_push_attempts:
                break
            log.info("webhook %s: %s; again in %.1f s", webhook_of(config.url), error, wait)
            if await self._pause(wait, msg):
                raise Stopped
            wait *= 2
        return error

    async def _pause(self, seconds: float, msg: Any) -> bool:
        """Wait `seconds`, keeping `msg` in progress; True if the process is stopping."""
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while (left := end - loop.time()) > 0:
            await msg.in_progress()
            if await stopped_within(self._stop, min(left, self.ack_wait_s / 2)):
                return True
        return False

    async def abandon(
        self, entry: PushEntry, config_id: str, seq: int, event: Event, error: str
    ) -> None:
        """Record in the task's session that the config's webhook did not take update
        `seq` (an id derived from the update: a redelivery appends it once)."""
        config = entry.config(config_id)
        task = entry.view.turn_id
        data = PushNotificationAbandonedData(
            task_id=task,
            config_id=config_id,
            webhook=webhook_of(config.url),
            update_seq=seq,
            attempts=self.settings.a2a_push_attempts,
            error=error,
        )
        given_up = stamp(
            PushNotificationAbandoned,
            data,
            Envelope.of(event),
            event_id=derived_id(f"{task}:{config_id}:{seq}", "push-abandoned", event.time),
            time=event.time,
            source=self.source,
            causation_id=event.id,
            turn_id=task,
        )
        await self.bus.store.append(event.session_id, [given_up])
        log.warning("webhook %s gave up on update %s:%s (%s)", data.webhook, task, seq, error)
