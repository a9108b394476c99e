"""What the executor writes besides results: its claims, and when a call's `Started` goes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from turnstream.bus.appender import AppendError, PipelinedAppender
from turnstream.bus.store import APPEND_TIMEOUT_S, WRONG_LAST_SEQUENCE


class Claims:
    """The invocations bucket's keys, written as its stream's subjects with the pipelined
    appender (one reply subscription for every write; nats-py's `KeyValue` pays a request,
    a future and a decoded `PubAck` for each). Values are read with `KeyValue.get`."""

    def __init__(self, nc: Any, bucket: str) -> None:
        self.prefix = f"$KV.{bucket}."
        self.appender = PipelinedAppender(nc)

    async def create(self, key: str, value: bytes) -> bool:
        """Write `value` if the key has never been written (`KeyValue.create`'s condition);
        False when it has."""
        item = (self.prefix + key, value, {"Nats-Expected-Last-Subject-Sequence": "0"})
        try:
            await self.appender.publish([item], APPEND_TIMEOUT_S)
        except AppendError as exc:
            if exc.err_code in WRONG_LAST_SEQUENCE:
                return False
            raise
        return True

    async def put(self, key: str, value: bytes) -> None:
        await self.appender.publish([(self.prefix + key, value, {})], APPEND_TIMEOUT_S)


class Started:
    """A call's `Started` fact: appended at once, after a grace, or with its result in one
    batch. Appended, it is always before what ends the call."""

    def __init__(
        self,
        event: Any,
        append: Callable[[Any], Awaitable[None]],
        append_all: Callable[[list[Any]], Awaitable[None]],
    ) -> None:
        self.event = event
        self.append, self.append_all = append, append_all
        self.task: asyncio.Future[None] | None = None
        self.timer: asyncio.TimerHandle | None = None

    def now(self, requests: set[asyncio.Future[None]]) -> None:
        """Append it beside the call; `requests` holds it until it is in (a shutdown waits
        for it as for a result)."""
        self.timer = None
        self.task = asyncio.ensure_future(self.append(self.event))
        requests.add(self.task)
        self.task.add_done_callback(requests.discard)

    def later(self, delay_s: float, requests: set[asyncio.Future[None]]) -> None:
        """`now`, unless the result comes within `delay_s`."""
        self.timer = asyncio.get_running_loop().call_later(delay_s, self.now, requests)

    async def with_result(self, result: Any) -> None:
        """Append the result after `Started` (with it, when it has not gone yet)."""
        self._stop_timer()
        if self.task is None:
            await self.append_all([self.event, result])
            return
        await self.task
        await self.append(result)

    async def alone(self) -> None:
        """Append `Started` now if it has not gone (the call ends without a result)."""
        self._stop_timer()
        if self.task is None:
            await self.append(self.event)
        else:
            await self.task

    def _stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
