"""Giving memory back to the OS once a burst of work is over.

glibc's malloc keeps what a burst freed (a wave of sessions: their messages, events and
tasks at once) in its heap for the next one, so a service's resident set stays near its
busiest moment. `malloc_trim(0)` hands the free pages back; a service calls it once its
work pauses (`QuietTrim`), never in the middle of a burst nor on a timer. Python's own
allocator (pymalloc, for objects up to 512 bytes) returns an arena only once all of it is
free; that part of a peak stays (docs/performance.md, "Memory over many sessions").
"""

from __future__ import annotations

import asyncio
import ctypes
from collections.abc import Callable
from typing import Any

QUIET_S = 1.0
"""How long a service goes without new work before it gives free memory back."""


def _malloc_trim() -> Any:
    try:
        return ctypes.CDLL(None).malloc_trim  # the process's own C library
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim
        return None


_MALLOC_TRIM = _malloc_trim()


def trim() -> bool:
    """Return the free memory in malloc's heap to the OS; False where there is no
    `malloc_trim` (a C library other than glibc)."""
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True


class QuietTrim:
    """Calls `release` once after each burst of work: when `quiet_s` went by with no
    `touch()` (called with each unit of work: a delivered item, a batch). One timer per
    burst, re-armed rather than rescheduled on every touch."""

    __slots__ = ("handle", "last", "quiet_s", "release")

    def __init__(self, quiet_s: float = QUIET_S, release: Callable[[], object] = trim) -> None:
        self.quiet_s = quiet_s
        self.release = release
        self.last = 0.0
        self.handle: asyncio.TimerHandle | None = None

    def touch(self) -> None:
        loop = asyncio.get_running_loop()
        self.last = loop.time()
        if self.handle is None:
            self.handle = loop.call_at(self.last + self.quiet_s, self._check)

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None

    def _check(self) -> None:
        loop = asyncio.get_running_loop()
        left = self.last + self.quiet_s - loop.time()
        if left > 0:  # touched since: wait for the rest of the quiet period
            self.handle = loop.call_later(left, self._check)
            return
        self.handle = None
        self.release()
