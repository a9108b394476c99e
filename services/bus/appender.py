"""Pipelined JetStream publishing with one reply subscription for all acks.

nats-py's `publish_async` pays for a semaphore, a future, `json.loads` and a `PubAck`
per message. Appending a turn's events is our hot path, so a batch here is published
back to back with replies `<inbox>.<batch>.<index>` and its acks are collected by one
wildcard subscription: 9 events in 0.65 ms instead of 0.95 ms, and 29k instead of 19k
events/s with many steps in flight (bench/append.py measures both side by side).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any

import orjson

Item = tuple[str, bytes, dict[str, str]]
"""subject, payload, headers"""


class AppendError(Exception):
    """JetStream refused a message (its `err_code` says why)."""

    def __init__(self, err_code: int, description: str) -> None:
        super().__init__(f"JetStream error {err_code}: {description}")
        self.err_code = err_code
        self.description = description


class _Batch:
    __slots__ = ("future", "remaining", "seqs")

    def __init__(self, size: int) -> None:
        self.seqs: list[int] = [0] * size
        self.remaining = size
        self.future: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()


class PipelinedAppender:
    def __init__(self, nc: Any) -> None:
        self.nc = nc
        self.inbox: str | None = None
        self.batches: dict[str, _Batch] = {}
        self.counter = itertools.count()
        self._starting: asyncio.Lock | None = None

    async def _start(self) -> str:
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self.inbox is None:
                inbox = self.nc.new_inbox()
                await self.nc.subscribe(inbox + ".*.*", cb=self._on_ack)
                self.inbox = inbox
        return self.inbox

    async def publish(self, items: Sequence[Item], timeout: float) -> list[int]:
        """Publish `items` in order; return their stream sequences once all are acked."""
        if not items:
            return []
        inbox = self.inbox or await self._start()
        key = str(next(self.counter))
        batch = self.batches[key] = _Batch(len(items))
        publish = self.nc.publish
        try:
            for index, (subject, payload, headers) in enumerate(items):
                await publish(subject, payload, reply=f"{inbox}.{key}.{index}", headers=headers)
            async with asyncio.timeout(timeout):
                return await batch.future
        finally:
            del self.batches[key]

    async def _on_ack(self, msg: Any) -> None:
        _, key, index = msg.subject.rsplit(".", 2)
        batch = self.batches.get(key)
        if batch is None or batch.future.done():
            return
        if not msg.data:  # a status message: no stream took it
            batch.future.set_exception(AppendError(503, "no stream for this subject"))
            return
        ack = orjson.loads(msg.data)
        error = ack.get("error")
        if error is not None:
            batch.future.set_exception(
                AppendError(int(error.get("err_code", 0)), str(error.get("description")))
            )
            return
        batch.seqs[int(index)] = int(ack["seq"])
        batch.remaining -= 1
        if batch.remaining == 0:
            batch.future.set_result(batch.seqs)
