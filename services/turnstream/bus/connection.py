"""Connect to NATS and hand out the pieces a service needs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import nats
from nats.aio.client import Client

from turnstream.bus.store import JetStreamEventStore
from turnstream.bus.streams import StreamLimits, ensure_streams
from turnstream.core.subjects import Subjects


@dataclass
class Bus:
    """One NATS connection with its JetStream context and the event store over it."""

    nc: Client
    js: Any
    subjects: Subjects
    store: JetStreamEventStore = field(init=False)

    def __post_init__(self) -> None:
        self.store = JetStreamEventStore(self.nc, self.js, self.subjects)

    async def close(self) -> None:
        if not self.nc.is_closed:
            await self.nc.drain()


async def connect(
    url: str,
    subjects: Subjects,
    *,
    name: str = "turnstream",
    ensure: StreamLimits | None = None,
    connect_timeout: float = 5.0,
) -> Bus:
    """Connect; with `ensure`, create or update the streams and buckets first."""
    try:
        nc = await nats.connect(
            [server.strip() for server in url.split(",")],  # a cluster: comma-separated
            name=name,
            connect_timeout=connect_timeout,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            pending_size=64 * 1024 * 1024,
            allow_reconnect=True,
        )
    except Exception as exc:  # nats-py raises several unrelated types here
        raise ConnectionError(
            f"cannot reach NATS at {url} ({exc}); start `turnstream up` or fix "
            "TURNSTREAM_NATS_URL / --nats-url"
        ) from exc
    js = nc.jetstream(publish_async_max_pending=8192)
    if ensure is not None:
        await ensure_streams(js, subjects, ensure)
    return Bus(nc, js, subjects)
