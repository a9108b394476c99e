"""Idle actors go: at once when the service says their state is stale (`retire`), and all
of them once the items pause (`quieted`); whoever keeps something per actor is told."""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any

from tests.unit.mailboxes import Forgetful, running
from turnstream.runtime.mailbox import Mailboxes
from turnstream.runtime.memory import QuietTrim


class Busy(Forgetful):
    """An actor with work in flight (a model call): never let go while so."""

    def busy(self) -> bool:
        return True


def boxes_of(actors: dict[str, Any], gone: list[str], **kwargs: Any) -> Mailboxes[int]:
    def make(key: str) -> Any:
        actor = actors[key] = Busy() if key.startswith("busy") else Forgetful()
        return actor

    return Mailboxes(make, gone=gone.append, **kwargs)


async def test_a_resting_actor_is_retired_and_a_busy_one_is_not() -> None:
    actors: dict[str, Any] = {}
    gone: list[str] = []
    boxes = boxes_of(actors, gone, quiet=QuietTrim(60, lambda: None))
    async with running(boxes):
        boxes.deliver("idle", 1)
        boxes.deliver("busy", 1)
        await asyncio.sleep(0.01)
        assert set(boxes.boxes) == {"idle", "busy"}
        assert boxes.retire("idle") is True
        assert boxes.retire("busy") is False
        assert boxes.retire("unknown") is False
        await asyncio.sleep(0.01)
        assert set(boxes.boxes) == {"busy"} and gone == ["idle"]
        boxes.deliver("idle", 2)  # its next item starts a new actor
        await asyncio.sleep(0.01)
        assert set(boxes.boxes) == {"idle", "busy"}


async def test_once_items_pause_every_resting_actor_goes_and_is_freed() -> None:
    actors: dict[str, Any] = {}
    gone: list[str] = []
    boxes = boxes_of(actors, gone)
    boxes.quiet = QuietTrim(0.5, boxes.quieted)  # long next to a slow machine's pauses
    async with running(boxes):
        for n in range(200):
            boxes.deliver(f"s{n}", n)
        boxes.deliver("busy", 0)
        await asyncio.sleep(0.02)
        refs = [weakref.ref(actors.pop(f"s{n}")) for n in range(200)]
        assert len(boxes.rested) == 200  # within `max_rested`: kept while items come
        await asyncio.sleep(0.8)
        assert set(boxes.boxes) == {"busy"} and not boxes.rested
        assert sorted(gone) == sorted(f"s{n}" for n in range(200))
        gc.disable()  # freed by reference counting, not left for the cyclic collector
        try:
            assert all(ref() is None for ref in refs)
        finally:
            gc.enable()
