"""The executor's writes: when a call's `Started` fact goes (at once, after a grace, or
with its result), and every write retried until the broker takes it (`until_done`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from turnstream.bus.appender import LogFull
from turnstream.bus.full import backoff_s

log = logging.getLogger("turnstream.tool_executor")


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


RETRY_MAX_S = 5.0
"""Longest wait between retries of an append while the broker is away."""


async def until_done(what: str, attempt: Callable[[], Awaitable[Any]]) -> None:
    """`attempt()` again, backing off up to `RETRY_MAX_S`, until it succeeds."""
    delay, refusals = 0.5, 0
    while True:
        try:
            await attempt()
            return
        except asyncio.CancelledError:
            raise
        except LogFull:
            # the store is full (the alarm logged it once): the result waits in memory,
            # backing off further, until space is freed
            refusals += 1
            await asyncio.sleep(backoff_s(refusals))
        except Exception as exc:
            log.warning("%s failed (%r); retrying in %.1f s", what, exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_S)
