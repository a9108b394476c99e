"""Per-session mailboxes: items in order per session, idle workers let go beyond a number."""

from __future__ import annotations

import asyncio
import gc
import weakref
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.unit.mailboxes import Forgetful, running
from turnstream.runtime import mailbox
from turnstream.runtime.mailbox import Delivered, Mailboxes


@dataclass
class Recorder:
    key: str
    made: list[str]
    handled: list[tuple[str, int]]
    in_flight: bool = False
    items: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.made.append(self.key)

    async def handle(self, item: int) -> None:
        await asyncio.sleep(0)
        self.items.append(item)
        self.handled.append((self.key, item))

    async def failed(self, item: int) -> None:
        raise AssertionError("nothing fails here")

    def busy(self) -> bool:
        return self.in_flight


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_idle_workers_beyond_the_number_kept_are_let_go_least_recently_used_first() -> None:
    made: list[str] = []
    handled: list[tuple[str, int]] = []
    actors: dict[str, Recorder] = {}

    def make(key: str) -> Recorder:
        actors[key] = Recorder(key, made, handled)
        return actors[key]

    boxes: Mailboxes[int] = Mailboxes(make, max_rested=2)
    async with running(boxes):
        boxes.deliver("a", 1)
        await settle()
        actors["a"].in_flight = True  # a call in flight: never let go while it runs
        for n, key in enumerate("bcde", 2):
            boxes.deliver(key, n)
            await settle()
        assert set(boxes.boxes) == {"a", "d", "e"}  # b and c went; a is busy
        assert boxes.actor("b") is None
        boxes.deliver("b", 6)  # a let-go session gets a new actor, the item is not lost
        await settle()
        assert made.count("b") == 2 and ("b", 6) in handled
        assert len([k for k in boxes.boxes if k != "a"]) == 2
        actors["a"].in_flight = False
        boxes.deliver("a", 7)
        await settle()
        assert made.count("a") == 1 and actors["a"].items == [1, 7]


class Msg:
    def __init__(self) -> None:
        self.beats = 0

    async def in_progress(self) -> None:
        self.beats += 1


async def test_a_delivered_message_is_kept_in_progress_until_it_is_handled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(mailbox, "ACK_WAIT_S", 0.3)  # a beat every 0.1 s
    made: list[str] = []
    handled: list[tuple[str, int]] = []
    release = asyncio.Event()

    class Slow(Recorder):
        async def handle(self, item: Any) -> None:
            await release.wait()

    boxes: Mailboxes[Any] = Mailboxes(lambda key: Slow(key, made, handled))
    first, queued = Msg(), Msg()
    async with running(boxes):
        boxes.deliver("s", Delivered(first, 1, None))  # type: ignore[arg-type]
        boxes.deliver("s", Delivered(queued, 2, None))  # type: ignore[arg-type]
        await asyncio.sleep(0.45)
        assert first.beats >= 3 and queued.beats >= 3  # handled and waiting alike
        release.set()
        await settle()
        beats = first.beats, queued.beats
        await asyncio.sleep(0.25)
        assert (first.beats, queued.beats) == beats  # none once handled
        assert not boxes.kept


@pytest.fixture
def no_cyclic_gc() -> Any:
    """What is freed here is freed by reference counting (the services run the cyclic
    collector rarely: `runtime/process.py`)."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()


@pytest.mark.usefixtures("no_cyclic_gc")
async def test_an_actor_let_go_is_freed_at_once_not_left_to_the_cyclic_collector() -> None:
    made: dict[str, weakref.ref[Forgetful]] = {}

    def make(key: str) -> Forgetful:
        actor = Forgetful()
        made[key] = weakref.ref(actor)
        return actor

    boxes: Mailboxes[int] = Mailboxes(make, max_rested=1)
    async with running(boxes):
        boxes.deliver("a", 1)
        await settle()
        boxes.deliver("b", 2)  # "a" rests longest: let go
        await settle()
        assert set(boxes.boxes) == {"b"}
        assert made["a"]() is None  # a cancelled worker's traceback kept it (and its state)
        assert made["b"]() is not None


@pytest.mark.usefixtures("no_cyclic_gc")
async def test_a_resting_worker_holds_no_message_it_handled() -> None:
    boxes: Mailboxes[Any] = Mailboxes(lambda key: Forgetful())
    async with running(boxes):
        msg = Msg()
        handled = weakref.ref(msg)
        boxes.deliver("s", Delivered(msg, 1, None))  # type: ignore[arg-type]
        del msg
        await settle()
        assert boxes.actor("s") is not None  # the worker waits for the next item
        assert handled() is None  # not even through its in-progress acks


async def test_a_worker_idle_for_idle_s_is_let_go_but_never_one_handling_or_busy() -> None:
    """One timer sweeps the idle workers: a worker that waited `idle_s` goes, one whose
    actor is busy stays, and one still handling a long item is never let go under it (a
    second actor for its session would then run beside it)."""
    made: list[str] = []
    handled: list[tuple[str, int]] = []
    actors: dict[str, Recorder] = {}
    release = asyncio.Event()

    class Long(Recorder):
        async def handle(self, item: int) -> None:
            if item == 0:
                await release.wait()
            await super().handle(item)

    def make(key: str) -> Recorder:
        actors[key] = Long(key, made, handled) if key == "long" else Recorder(key, made, handled)
        return actors[key]

    boxes: Mailboxes[int] = Mailboxes(make, idle_s=0.2)
    async with running(boxes):
        for key in ("idle", "busy"):
            boxes.deliver(key, 1)
        boxes.deliver("long", 0)
        await settle()
        actors["busy"].in_flight = True
        await asyncio.sleep(0.5)  # past idle_s and two sweeps
        assert boxes.actor("idle") is None
        assert boxes.actor("busy") is actors["busy"]
        assert boxes.actor("long") is actors["long"]  # still in its first item
        boxes.deliver("long", 2)
        release.set()
        await settle()
        assert made.count("long") == 1 and actors["long"].items == [0, 2]
        boxes.deliver("idle", 3)  # a session let go gets a new actor
        await settle()
        assert made.count("idle") == 2 and ("idle", 3) in handled


async def test_a_message_handled_at_once_is_never_beaten(monkeypatch: pytest.MonkeyPatch) -> None:
    """The beat timer runs only while messages are kept, and beats none that came in the
    last half of a beat's period."""
    monkeypatch.setattr(mailbox, "ACK_WAIT_S", 0.3)
    boxes: Mailboxes[Any] = Mailboxes(lambda key: Forgetful())
    msgs = [Msg() for _ in range(5)]
    async with running(boxes):
        for n, msg in enumerate(msgs):
            boxes.deliver(f"s{n}", Delivered(msg, n + 1, None))  # type: ignore[arg-type]
        await settle()
        assert not boxes.kept
        await asyncio.sleep(0.25)
        assert [m.beats for m in msgs] == [0] * 5
        assert boxes.kept.timer is None
