"""A service's own connection to NATS: streams ensured, closed when the service is done."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from turnstream.bus import Bus, connect
from turnstream.bus.streams import StreamLimits
from turnstream.runtime.clock import source_name
from turnstream.settings import Settings


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
        inbox_prefix=settings.nats_inbox_prefix,
    )


async def connect_client(settings: Settings, name: str) -> Bus:
    """Connect as a client (the CLI, the HTTP face): nothing is created, so a user that may
    only send commands can connect."""
    return await connect(
        settings.resolved_nats_url(),
        settings.subjects,
        name=source_name(name),
        inbox_prefix=settings.nats_inbox_prefix,
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
