"""Per-session mailboxes: one worker task per session, items handled one at a time.

A session's facts are handled in order on its own task, so a session never does two
things at once while different sessions proceed in parallel. An idle worker exits (its
state is a rebuildable copy of the log); the next item for its session starts a new one.
Idle workers are also let go beyond a number kept (`max_rested`, least recently used
first), so memory follows the sessions at work, not every session seen in `idle_s`; once
no item came for a second, the free memory a burst left is given back (`QuietTrim`).

A delivered message is kept with in-progress acks from its arrival until its actor is done
with it, so the consumers' ack wait can be short (`ACK_WAIT_S`): what a dead instance had
taken comes back within seconds, whatever its sessions were doing.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from turnstream.bus import Bus
from turnstream.bus.consume import InProgress, durable_push
from turnstream.core.events import Event, decode
from turnstream.runtime.memory import QuietTrim

log = logging.getLogger("turnstream")
ACK_WAIT_S = 10.0
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
        return cls(msg, msg.metadata.sequence.stream, event)


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
    def __init__(self, actor: Actor[Item]) -> None:
        self.actor = actor
        self.inbox: asyncio.Queue[Item | _LetGo] = asyncio.Queue()
        self.closed = False


class Mailboxes(Generic[Item]):
    def __init__(
        self,
        make_actor: Callable[[str], Actor[Item]],
        *,
        idle_s: float = 300.0,
        max_rested: int = 500,
        quiet: QuietTrim | None = None,
    ) -> None:
        self.make_actor = make_actor
        self.idle_s = idle_s
        self.max_rested = max_rested
        self.quiet = quiet or QuietTrim()
        """Told of every item: gives free memory back once they pause."""
        self.boxes: dict[str, _Mailbox[Item]] = {}
        self.kept: dict[int, InProgress] = {}
        """In-progress acks of delivered messages not yet handled, by `id` of the item."""
        self.rested: OrderedDict[str, None] = OrderedDict()
        """Sessions whose worker waits with an empty inbox and nothing in flight, least
        recently used first."""
        self.tasks: asyncio.TaskGroup | None = None
        self.workers: set[asyncio.Task[None]] = set()
        self.closing = False

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
            self.kept[id(item)] = InProgress([item.msg], ACK_WAIT_S)
        box = self.boxes.get(key)
        if box is None or box.closed:
            box = self.boxes[key] = _Mailbox(self.make_actor(key))
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
        async with asyncio.TaskGroup() as tasks:
            self.tasks = tasks
            await until.wait()
            self.closing = True  # no new worker may start while these wind down
            self.quiet.cancel()
            for kept in self.kept.values():
                kept.stop()
            self.kept.clear()
            for task in list(self.workers):
                task.cancel()
        self.tasks = None

    async def _work(self, key: str, box: _Mailbox[Item]) -> None:
        try:
            while True:
                try:
                    # asyncio.timeout, never wait_for: on 3.11 wait_for swallows a
                    # cancellation that races the inner future, and the task then hangs
                    async with asyncio.timeout(self.idle_s):
                        item = await box.inbox.get()
                except TimeoutError:
                    if box.inbox.empty() and not box.actor.busy():
                        box.closed = True  # no await between the check and this: no lost item
                        return
                    continue
                if isinstance(item, _LetGo):
                    return  # let go while resting (`_rest`): closed and forgotten already
                try:
                    await box.actor.handle(item)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("session %s: handling failed", key)
                    await box.actor.failed(item)
                finally:
                    self._settle(item)
                del item  # a waiting worker holds no message (its payload, its event)
                if _cancel_swallowed():
                    raise asyncio.CancelledError
                if box.inbox.empty() and not box.actor.busy():
                    self._rest(key)
        finally:
            box.closed = True
            if self.boxes.get(key) is box:
                del self.boxes[key]
                self.rested.pop(key, None)

    def _settle(self, item: Item) -> None:
        """Stop the in-progress acks of a handled item (a method, so the worker's frame
        keeps no reference to them, nor through them to the message)."""
        kept = self.kept.pop(id(item), None)
        if kept is not None:
            kept.stop()

    def _rest(self, key: str) -> None:
        """`key`'s worker waits with nothing to do: let the least recently used such workers
        go beyond `max_rested` (an item for one of them later starts a new worker)."""
        self.rested[key] = None
        self.rested.move_to_end(key)
        while len(self.rested) > self.max_rested:
            oldest, _ = self.rested.popitem(last=False)
            box = self.boxes.get(oldest)
            # no await between this check and closing: no item can slip in between
            if box is None or box.closed or not box.inbox.empty() or box.actor.busy():
                continue
            box.closed = True
            del self.boxes[oldest]
            box.inbox.put_nowait(_LET_GO)  # it returns, no cancellation (see `_LetGo`)


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
    durable: str,
    kinds: Sequence[str],
    to_item: Callable[[Any, Event], Item],
    stop: asyncio.Event,
    resume: Callable[[], Coroutine[Any, Any, None]],
) -> None:
    """Consume `kinds` from the log into per-session mailboxes until `stop`.

    `resume` runs once the mailboxes take items: it wakes the sessions that need it after
    a restart (their state is in the log; the consumer only brings what is new).
    """
    subjects = bus.subjects

    async def on_msg(msg: Any) -> None:
        event = decode(msg.data)
        mailboxes.deliver(event.session_id, to_item(msg, event))

    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(mailboxes.run(stop))
        await asyncio.sleep(0)  # the mailboxes take items from here on
        tasks.create_task(resume())
        sub = await durable_push(
            bus.js,
            subjects.log_stream,
            durable,
            subjects.deliver(durable),
            [subjects.log_kind(kind) for kind in kinds],
            on_msg,
            ack_wait_s=ACK_WAIT_S,
        )
        await stop.wait()
        await sub.unsubscribe()
