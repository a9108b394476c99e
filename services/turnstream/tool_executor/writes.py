"""When a call's `Started` fact goes: at once, after a grace, or with its result."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any


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
