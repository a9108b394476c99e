"""Helpers for the tests of `runtime.mailbox`: mailboxes running, an actor that keeps nothing."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from turnstream.runtime.mailbox import Mailboxes


class Forgetful:
    """An actor that keeps nothing of what it handles."""

    async def handle(self, item: Any) -> None:
        await asyncio.sleep(0)

    async def failed(self, item: Any) -> None:
        raise AssertionError("nothing fails here")

    def busy(self) -> bool:
        return False


@contextlib.asynccontextmanager
async def running(boxes: Mailboxes[Any]) -> AsyncIterator[None]:
    """`boxes` taking items for the block, stopped after it."""
    stop = asyncio.Event()
    task = asyncio.create_task(boxes.run(stop))
    await asyncio.sleep(0)
    try:
        yield
    finally:
        stop.set()
        await task
