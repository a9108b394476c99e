"""What every service shell shares: the real clock and ids, its name, signals, connecting."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import uuid_utils

from turnstream.bus import Bus, connect
from turnstream.bus.kv import watch
from turnstream.bus.streams import StreamLimits
from turnstream.core.turn import ToolInfo
from turnstream.hooks import HookRegistry
from turnstream.settings import Settings
from turnstream.tools import ToolRegistry

log = logging.getLogger("turnstream")


def now() -> datetime:
    return datetime.now(UTC)


def new_event_id() -> str:
    return str(uuid_utils.uuid7())


def source_name(service: str) -> str:
    return f"{service}/{socket.gethostname()}-{os.getpid()}"


def stream_limits(settings: Settings) -> StreamLimits:
    return StreamLimits(
        log_max_age_days=settings.log_max_age_days,
        inbound_max_age_days=settings.inbound_max_age_days,
        duplicate_window_s=settings.duplicate_window_s,
        replicas=settings.replicas,
    )


async def connect_service(settings: Settings, service: str) -> Bus:
    """Connect and make sure the streams exist (every service may be the first one up)."""
    return await connect(
        settings.resolved_nats_url(),
        settings.subjects,
        name=source_name(service),
        ensure=stream_limits(settings),
    )


@asynccontextmanager
async def service_bus(settings: Settings, service: str, bus: Bus | None) -> AsyncIterator[Bus]:
    """`bus` if given (tests share one), else a connection of the service's own, closed
    when the service is done."""
    if bus is not None:
        yield bus
        return
    own = await connect_service(settings, service)
    try:
        yield own
    finally:
        await own.close()


YOUNG_GC_EVERY = 100_000
"""Allocations between two collections of the youngest generation (Python's default: 700)."""


def tune_gc() -> None:
    """A service allocates thousands of short-lived objects per turn (events, their data,
    dicts), so the cyclic collector, at its default pace, ran every few events: collecting
    the young generation every 100,000 allocations instead, with what startup made frozen
    out of every collection, takes some 6% off each turn's CPU (`bench/compare.py`, side
    by side). Reference counting still frees almost everything at once."""
    gc.freeze()
    gc.set_threshold(YOUNG_GC_EVERY, 50, 100)


def run_service(service: str, serve: Callable[[Settings, asyncio.Event], Awaitable[None]]) -> None:
    """Run `serve` until SIGINT/SIGTERM sets its stop event; it then drains and returns."""
    logging.basicConfig(
        level=os.environ.get("TURNSTREAM_LOG_LEVEL", "INFO"),
        format=f"%(asctime)s {service} %(levelname)s %(message)s",
    )
    settings = Settings()
    tune_gc()

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await serve(settings, stop)

    profile_to = os.environ.get("TURNSTREAM_PROFILE_DIR")
    try:
        if profile_to:  # for finding where a service spends its time (bench, ops)
            import cProfile

            with cProfile.Profile() as profile:
                asyncio.run(main())
            profile.dump_stats(f"{profile_to}/{service}-{os.getpid()}.prof")
        else:
            asyncio.run(main())
    except (ConnectionError, ValueError) as exc:  # bad settings or no server: say which
        log.error("%s", exc)
        raise SystemExit(2) from exc


def tool_infos(registry: ToolRegistry) -> tuple[ToolInfo, ...]:
    """What the turn core needs to know of each registered tool."""
    return tuple(
        ToolInfo(
            name=spec.name,
            description=spec.description,
            parameters=spec.parameters,
            read_only=spec.read_only,
            idempotent=spec.idempotent,
            timeout_s=spec.timeout_s,
        )
        for spec in registry.specs()
    )


async def watch_hooks(bus: Bus, hooks: HookRegistry, stop: asyncio.Event) -> None:
    """Keep the remote hooks of `hooks` in step with the hooks bucket."""

    def apply(entry: Any) -> None:
        deleted = entry.operation in ("DEL", "PURGE") or entry.value is None
        hooks.set_remote(entry.key, None if deleted else entry.value)

    kv = await bus.js.key_value(bus.subjects.hooks_bucket)
    await watch(kv, stop, apply, "hooks")
