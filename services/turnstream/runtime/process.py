"""How a service process runs: logging, GC tuning, signals, an optional profile."""

from __future__ import annotations

import asyncio
import contextlib
import cProfile
import gc
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Any

from turnstream.bus.permissions import PermissionDenied
from turnstream.bus.streams import StreamsMissing
from turnstream.runtime import telemetry
from turnstream.runtime.redaction import redact_logs
from turnstream.settings import Settings

log = logging.getLogger("turnstream")


YOUNG_GC_EVERY = 100_000
"""Allocations between two collections of the youngest generation (Python's default: 700)."""


FIXABLE = (ConnectionError, ValueError, StreamsMissing, PermissionDenied)
"""What a service cannot start without and the operator can fix: said in one line, exit 2."""


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    return [
        leaf
        for exc in group.exceptions
        for leaf in (_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    ]


def tune_gc() -> None:
    """A service allocates thousands of short-lived objects per turn (events, their data,
    dicts), so the cyclic collector, at its default pace, ran every few events: collecting
    the young generation every 100,000 allocations instead, with what startup made frozen
    out of every collection, takes some 6% off each turn's CPU (`bench/compare.py`, side
    by side). Reference counting still frees almost everything at once."""
    gc.freeze()
    gc.set_threshold(YOUNG_GC_EVERY, 50, 100)


def loop_factory() -> Any:
    """uvloop's event loop where there is one (a dependency, but not on Windows), else
    asyncio's (None). Every message wakes a service's loop, which costs less on uvloop
    (bench/compare.py, docs/performance.md: with GOMAXPROCS=1, 0.95 of the total CPU)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run_service(service: str, serve: Callable[[Settings, asyncio.Event], Awaitable[None]]) -> None:
    """Run `serve` until SIGINT/SIGTERM sets its stop event; it then drains and returns."""
    logging.basicConfig(
        level=os.environ.get("TURNSTREAM_LOG_LEVEL", "INFO"),
        format=f"%(asctime)s {service} %(levelname)s %(message)s",
    )
    settings = Settings()
    redact_logs(settings.log_secrets())
    telemetry.setup(service)
    tune_gc()

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await serve(settings, stop)

    profile_to = os.environ.get("TURNSTREAM_PROFILE_DIR")
    # a profile, for finding where a service spends its time (bench, ops)
    profile = cProfile.Profile() if profile_to else contextlib.nullcontext()
    try:
        with profile, asyncio.Runner(loop_factory=loop_factory()) as runner:
            runner.run(main())
        if isinstance(profile, cProfile.Profile):
            profile.dump_stats(f"{profile_to}/{service}-{os.getpid()}.prof")
    except FIXABLE as exc:  # the fix is named
        log.error("%s", exc)
        raise SystemExit(2) from exc
    except ExceptionGroup as group:  # raised in one of the service's tasks
        fixable, rest = group.split(FIXABLE)
        if fixable is None or rest is not None:
            raise
        for leaf in _leaves(fixable):
            log.error("%s", leaf)
        raise SystemExit(2) from group
    finally:
        telemetry.shutdown()
