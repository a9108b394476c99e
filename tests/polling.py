"""Waiting for another task's state in a test: poll until it holds, never a bare sleep a
slow machine could outrun."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


async def eventually(check: Callable[[], Any], timeout: float = 20.0) -> Any:
    """`check()` once it is truthy (a TimeoutError after `timeout` seconds)."""
    async with asyncio.timeout(timeout):
        while not (found := check()):  # noqa: ASYNC110 (polls other tasks' state, not an event)
            await asyncio.sleep(0.05)
        return found
