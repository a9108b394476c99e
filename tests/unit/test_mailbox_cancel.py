"""A session worker cancelled while it handles an item ends, even when the cancellation
never reaches it (nats-py's requests on Python 3.11 return a reply that raced it)."""

from __future__ import annotations

import asyncio

from turnstream.runtime.mailbox import Mailboxes


class Swallower:
    """An actor whose handler swallows a cancellation, as a nats-py request does when its
    reply arrives with it."""

    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def handle(self, item: int) -> None:
        self.started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            return

    async def failed(self, item: int) -> None:
        raise AssertionError("nothing fails here")

    def busy(self) -> bool:
        return False


async def test_a_worker_whose_cancellation_was_swallowed_still_ends_at_shutdown() -> None:
    actor = Swallower()
    boxes: Mailboxes[int] = Mailboxes(lambda _key: actor)  # an idle worker waits 300 s
    stop = asyncio.Event()
    running = asyncio.create_task(boxes.run(stop))
    await asyncio.sleep(0)
    boxes.deliver("s", 1)
    await asyncio.wait_for(actor.started.wait(), 1)
    stop.set()
    async with asyncio.timeout(2):
        await running
    assert not boxes.boxes
