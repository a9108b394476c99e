"""gateway shell: pull inbound commands, append what `intake` decides, then ack."""

from __future__ import annotations

import asyncio
import logging

from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import api

from turnstream.bus import Bus
from turnstream.gateway.intake import Inbound, intake
from turnstream.runtime import connect_service, now, run_service, source_name
from turnstream.settings import Settings

log = logging.getLogger("turnstream.gateway")
DURABLE = "gateway"
BATCH = 256


async def serve(settings: Settings, stop: asyncio.Event, bus: Bus | None = None) -> None:
    """Consume `<prefix>.in.>` until `stop` is set."""
    own_bus = bus is None
    bus = bus or await connect_service(settings, "gateway")
    subjects, source = bus.subjects, source_name("gateway")
    sub = await bus.js.pull_subscribe(
        subjects.inbound_all,
        durable=DURABLE,
        stream=subjects.inbound_stream,
        config=api.ConsumerConfig(ack_wait=30, max_ack_pending=20_000),
    )
    log.info("gateway consuming %s", subjects.inbound_all)
    try:
        while not stop.is_set():
            try:
                msgs = await sub.fetch(BATCH, timeout=0.5)
            except (TimeoutError, NatsTimeoutError):
                continue
            except NatsError as exc:  # disconnected: nats-py reconnects, we retry
                log.warning("fetch failed (%s); retrying", exc)
                await asyncio.sleep(0.5)
                continue
            events = []
            for msg in msgs:
                meta = msg.metadata
                raw = Inbound(
                    session_token=subjects.session_of_inbound(msg.subject),
                    data=msg.data,
                    seq=meta.sequence.stream,
                    stored_at=meta.timestamp,
                    stream=subjects.inbound_stream,
                )
                events.extend(
                    intake(raw, max_bytes=settings.max_input_bytes, now=now(), source=source)
                )
            try:
                await bus.store.append_facts(events)
            except Exception:
                log.exception("append failed; the commands will be redelivered")
                continue
            for msg in msgs:
                await msg.ack()
    finally:
        await sub.unsubscribe()
        if own_bus:
            await bus.close()


def main() -> None:
    run_service("gateway", serve)
