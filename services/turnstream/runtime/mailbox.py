"""Per-session mailboxes: one worker task per session, items handled one at a time.

A session's facts are handled in order on its own task, so a session never does two
things at once while different sessions proceed in parallel. An idle worker exits (its
state is a rebuildable copy of the log); the next item for its session starts a new one.
Idle workers are also let go beyond a number kept (`max_rested`, least recently used
first), so memory follows the sessions at work, not every session seen in `idle_s`; once
no item came for a second, every idle worker is let go and the free memory a burst left
is given back (`QuietTrim`): a resting actor allocated in a burst keeps the allocator's
arenas it sits in, so memory after a burst would otherwise stay near its peak. A service
may also let one go as soon as its state is stale (`retire`: the turn-runner, once it
released the session's lease).

A delivered message is kept with in-progress acks from its arrival until its actor is done
with it, so the consumers' ack wait can be short (`ACK_WAIT_S`): what a dead instance had
taken comes back within seconds, whatever its sessions were doing.

Timers are shared, not made per item: one beats every message kept long enough (`_Kept`),
one lets idle workers go (`_sweep`). A timer per message and an `asyncio.timeout` per
wait for the next item cost the turn-runner a few percent of its CPU.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from turnstream.bus import Bus
from turnstream.bus.consume import beat
from turnstream.bus.durables import SESSION_ACK_WAIT_S, Durable
from turnstream.bus.retry import stoppable
from turnstream.bus.scan import stream_seq
from turnstream.core.events import Event, decode
from turnstream.runtime.memory import QuietTrim, trim

log = logging.getLogger("turnstream")
ACK_WAIT_S = SESSION_ACK_WAIT_S
"""The session consumers' ack wait: how soon a message a dead instance had taken, before
it held the session's lease (so no lease expiry announces it), is delivered again."""
Item = TypeVar("Item")
Item_contra = TypeVar("Item_contra", contravariant=True)


@dataclass(frozen=True, slots=True)
class Delivered:
    """A message a service's durable consumer delivered: acked (or nak'ed) by its actor once
    what it caused is in the log."""

    msg: Any
    seq: int
    """Its stream sequence."""
    event: Event

    @classmethod
    def of(cls, msg: Any, event: Event) -> Delivered:
        return cls(msg, stream_seq(msg), event)

    def __str__(self) -> str:
        """How a log line names it."""
        delivery = self.msg.metadata.num_delivered
        return f"{self.event.type} at {self.seq} (delivery {delivery})"


class Actor(Protocol[Item_contra]):
    async def handle(self, item: Item_contra) -> None:
        """Handle one item; raising means it was not handled (see `failed`)."""
        ...

    async def failed(self, item: Item_contra) -> None:
        """`handle` raised: e.g. nak the message so it is redelivered, forget cached state."""
        ...

    def busy(self) -> bool:
        """True while the actor must stay alive with an empty inbox (e.g. a call in flight)."""
        ...


class _LetGo:
    """Put in a resting worker's inbox to have it return: a task cancelled instead ends with
    a `CancelledError` whose traceback holds the worker's frames, and they hold the task
    (through the mailbox), so the actor and all it kept would wait for the cyclic collector,
    which the services run rarely (`runtime/process.py`)."""


_LET_GO = _LetGo()


class _Mailbox(Generic[Item]):
    def __init__(self, actor: Actor[Item], now: float) -> None:
        self.actor = actor
        self.inbox: asyncio.Queue[Item | _LetGo] = asyncio.Queue()
        self.closed = False
        self.waiting = True
        """Its worker is between items (only such a worker is let go)."""
        self.used_at = now
        """When it last finished an item (`_sweep` lets it go `idle_s` after)."""


class _Kept:
    """In-progress acks of the delivered messages not yet handled, by `id` of their item:
    one timer every third of the ack wait beats each kept for at least half of that, so
    a message is beaten first before half its ack wait has passed, and then as often as
    `InProgress` would (most are handled within milliseconds and never beat)."""

    def __init__(self) -> None:
        self.msgs: dict[int, tuple[Any, float]] = {}
        self.timer: asyncio.TimerHandle | None = None

    def keep(self, key: int, msg: Any) -> None:
        loop = asyncio.get_running_loop()
        self.msgs[key] = (msg, loop.time())
        if self.timer is None:
            self.timer = loop.call_later(ACK_WAIT_S / 3, self._beat)

    def settle(self, key: int) -> None:
        self.msgs.pop(key, None)

    def stop(self) -> None:
        self.msgs.clear()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _beat(self) -> None:
        loop = asyncio.get_running_loop()
        every = ACK_WAIT_S / 3
        since = loop.time() - every / 2
        for msg, arrived in self.msgs.values():
            if arrived <= since:
                beat(msg)
        self.timer = loop.call_later(every, self._beat) if self.msgs else None

    def __len__(self) -> int:
        return len(self.msgs)


class Mailboxes(Generic[Item]):
    def __init__(
        self,
        make_actor: Callable[[str], Actor[Item]],
        *,
        idle_s: float = 300.0,
        max_rested: int = 500,
        quiet: QuietTrim | None = None,
        gone: Callable[[str], object] = lambda _key: None,
    ) -> None:
        self.make_actor = make_actor
        self.gone = gone
        """Told of each session whose worker is let go (what is kept for its actor goes)."""
        self.idle_s = idle_s
        self.max_rested = max_rested
        self.quiet = quiet or QuietTrim(release=self.quieted)
        """Told of every item: once they pause, idle workers go and free memory is given
        back (`quieted`)."""
        self.boxes: dict[str, _Mailbox[Item]] = {}
        self.kept = _Kept()
        """In-progress acks of delivered messages not yet handled, by `id` of the item."""
        self.rested: OrderedDict[str, None] = OrderedDict()
        """Sessions whose worker waits with an empty inbox and nothing in flight, least
        recently used first."""
        self.tasks: asyncio.TaskGroup | None = None
        self.workers: set[asyncio.Task[None]] = set()
        self.closing = False
        self._sweeping: asyncio.TimerHandle | None = None

    def spawn(self, work: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """A task of the mailboxes: an actor's worker, or its side task (a model call). It is
        cancelled on shutdown with the workers, so a long call does not hold it up."""
        assert self.tasks is not None, "the mailboxes are not running"
        task = self.tasks.create_task(work, name=name)
        self.workers.add(task)
        task.add_done_callback(self.workers.discard)
        return task

    def deliver(self, key: str, item: Item) -> None:
        if self.closing:
            return  # shutting down: an unacked message comes again, a timer is moot
        self.rested.pop(key, None)
        self.quiet.touch()
        if isinstance(item, Delivered):
            self.kept.keep(id(item), item.msg)
        box = self.boxes.get(key)
        if box is None or box.closed:
            now = asyncio.get_running_loop().time()
            box = self.boxes[key] = _Mailbox(self.make_actor(key), now)
            self.spawn(self._work(key, box), f"session:{key}")
        box.inbox.put_nowait(item)

    def deliver_later(self, key: str, item: Item, delay_s: float) -> asyncio.TimerHandle:
        """Deliver `item` after `delay_s` (deadlines, wall-time bounds)."""
        return asyncio.get_running_loop().call_later(max(0.0, delay_s), self.deliver, key, item)

    def actor(self, key: str) -> Actor[Item] | None:
        box = self.boxes.get(key)
        return box.actor if box is not None and not box.closed else None

    async def run(self, until: asyncio.Event) -> None:
        """Keep the workers alive until `until` is set, then cancel them."""
        self._sweeping = asyncio.get_running_loop().call_later(self.idle_s / 4, self._sweep)
        async with asyncio.TaskGroup() as tasks:
            self.tasks = tasks
            await until.wait()
            self.closing = True  # no new worker may start while these wind down
            self.quiet.cancel()
            self._sweeping.cancel()
            self.kept.stop()
            for task in list(self.workers):
                task.cancel()
        self.tasks = None

    async def _work(self, key: str, box: _Mailbox[Item]) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                item = await box.inbox.get()
                box.waiting = False
                if isinstance(item, _LetGo):
                    return  # let go while resting (`_rest`, `_sweep`): closed, forgotten
                try:
                    await box.actor.handle(item)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("session %s: handling failed", key)
                    await box.actor.failed(item)
                finally:
                    self.kept.settle(id(item))
                del item  # a waiting worker holds no message (its payload, its event)
                if _cancel_swallowed():
                    raise asyncio.CancelledError
                box.used_at, box.waiting = loop.time(), True
                if box.inbox.empty() and not box.actor.busy():
                    self._rest(key)
        finally:
            box.closed = True
            if self.boxes.get(key) is box:
                del self.boxes[key]
                self.rested.pop(key, None)
                self.gone(key)

    def retire(self, key: str) -> bool:
        """Let `key`'s worker go if it rests (waits with nothing to do); whether it did."""
        box = self.boxes.get(key)
        if box is None or box.closed:
            return False
        self._let_go(key, box)
        return box.closed

    def quieted(self) -> None:
        """No item came for `QUIET_S`: let every resting worker go, then give the free
        memory back to the OS once they have returned (their frames freed)."""
        for key in list(self.rested):
            self.retire(key)
        asyncio.get_running_loop().call_soon(trim)

    def _sweep(self) -> None:
        """Let the workers go that waited `idle_s` with nothing to do (an item for one of
        them later starts a new worker); every quarter of `idle_s`, one timer for all."""
        loop = asyncio.get_running_loop()
        if self.closing:
            return
        now = loop.time()
        for key, box in list(self.boxes.items()):
            if now - box.used_at >= self.idle_s:
                self._let_go(key, box)
        self._sweeping = loop.call_later(self.idle_s / 4, self._sweep)

    def _let_go(self, key: str, box: _Mailbox[Item]) -> None:
        """Have a waiting worker return, if it has nothing to do (no await between this
        check and closing its box: no item can slip in between)."""
        if box.closed or not box.waiting or not box.inbox.empty() or box.actor.busy():
            return
        box.closed = True
        if self.boxes.get(key) is box:
            del self.boxes[key]
            self.gone(key)
        self.rested.pop(key, None)
        box.inbox.put_nowait(_LET_GO)  # it returns, no cancellation (see `_LetGo`)

    def _rest(self, key: str) -> None:
        """`key`'s worker waits with nothing to do: let the least recently used such workers
        go beyond `max_rested` (an item for one of them later starts a new worker)."""
        self.rested[key] = None
        self.rested.move_to_end(key)
        while len(self.rested) > self.max_rested:
            oldest, _ = self.rested.popitem(last=False)
            box = self.boxes.get(oldest)
            if box is not None:
                self._let_go(oldest, box)


def _cancel_swallowed() -> bool:
    """Whether this task was cancelled and the cancellation never reached it. nats-py waits
    for a request's reply with `asyncio.wait_for`, which on Python 3.11 returns a reply that
    came with the cancellation instead of raising it; a worker cancelled at shutdown in a
    handler then went back to its inbox for `idle_s`, and the shutdown waited."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def serve_sessions(
    bus: Bus,
    mailboxes: Mailboxes[Item],
    durable: Durable,
    to_item: Callable[[Any, Event], Item],
    stop: asyncio.Event,
    resume: Callable[[], Coroutine[Any, Any, None]],
) -> None:
    """Consume what `durable` hands over from the log into per-session mailboxes until
    `stop`.

    `resume` runs once the mailboxes take items: it wakes the sessions that need it after
    a restart (their state is in the log; the consumer only brings what is new).
    """

    async def on_msg(msg: Any) -> None:
        event = decode(msg.data)
        mailboxes.deliver(event.session_id, to_item(msg, event))

    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(mailboxes.run(stop))
        await asyncio.sleep(0)  # the mailboxes take items from here on
        tasks.create_task(resume())
        # bound once NATS answers (`bus.retry`), or not at all if `stop` comes first
        sub = await stoppable(bus.log_push(durable, on_msg), stop)
        await stop.wait()
        if sub is not None:
            await sub.unsubscribe()
