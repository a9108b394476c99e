"""The appender's deadlines: one timer for every batch in flight, not one per batch."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from turnstream.bus import appender
from turnstream.bus.appender import PipelinedAppender


class Silent:
    """A connection whose messages are never acknowledged."""

    def __init__(self) -> None:
        self.published: list[str] = []

    def new_inbox(self) -> str:
        return "_INBOX.t"

    async def subscribe(self, subject: str, cb: Any) -> None:
        return None

    async def publish(self, subject: str, payload: bytes, reply: str, headers: Any) -> None:
        self.published.append(subject)


async def test_a_batch_nobody_acknowledges_times_out_and_is_forgotten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(appender, "TICK_S", 0.05)
    pipe = PipelinedAppender(Silent())
    item = ("ts.log.s.X", b"{}", {})
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(TimeoutError):
        await pipe.publish([item], 0.2)
    with pytest.raises(TimeoutError):
        await pipe.publish_batch([item, item], 0.1)
    took = loop.time() - start
    assert 0.3 <= took < 1.0
    assert not pipe.batches and not pipe.fast
    await asyncio.sleep(0.1)
    assert pipe._ticking is None  # nothing in flight: no timer left behind


async def test_a_later_batch_keeps_its_own_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(appender, "TICK_S", 0.05)
    pipe = PipelinedAppender(Silent())
    item = ("ts.log.s.X", b"{}", {})
    short = asyncio.ensure_future(pipe.publish([item], 0.1))
    long = asyncio.ensure_future(pipe.publish([item], 0.6))
    with pytest.raises(TimeoutError):
        await short
    assert not long.done()
    long.cancel()
    with pytest.raises(asyncio.CancelledError):
        await long
    assert not pipe.batches
