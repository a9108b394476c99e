"""A service's own connection to NATS: streams ensured, closed when the service is done."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson

from turnstream.bus import Bus, connect
from turnstream.bus.full import ALARM, STATUS_VERB
from turnstream.bus.streams import StreamLimits
from turnstream.runtime.clock import source_name
from turnstream.settings import Settings


def stream_limits(settings: Settings) -> StreamLimits:
    return StreamLimits(
        log_max_age_days=settings.log_max_age_days,
        inbound_max_age_days=settings.inbound_max_age_days,
        invocation_max_age_days=settings.invocation_max_age_days,
        duplicate_window_s=settings.duplicate_window_s,
        replicas=settings.replicas,
        a2a_push_timeout_s=settings.a2a_push_timeout_s,
    )


async def connect_service(settings: Settings, service: str) -> Bus:
    """Connect and check the streams exist: the setup step created them (`turnstream
    streams apply`, `turnstream up`); a service never creates one."""
    return await connect(
        settings.resolved_nats_url(),
        settings.subjects,
        name=source_name(service),
        check=True,
        inbox_prefix=settings.nats_inbox_prefix,
    )


async def apply_streams(settings: Settings) -> None:
    """The setup step: create or update the streams and buckets (as the operator)."""
    bus = await connect(
        settings.resolved_nats_url(),
        settings.subjects,
        name=source_name("setup"),
        ensure=stream_limits(settings),
        inbox_prefix=settings.nats_inbox_prefix,
    )
    await bus.close()


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
    name = source_name(service)

    async def storage(msg: Any) -> None:  # `turnstream status`: this process's view
        await msg.respond(orjson.dumps({"service": service, "source": name, **ALARM.snapshot()}))

    try:
        with contextlib.suppress(Exception):  # a user that may not: status goes without it
            await own.nc.subscribe(own.subjects.api(service, STATUS_VERB), cb=storage)
        yield own
    finally:
        await own.close()
