"""The push delivery's durable consumer on the log (`a2a-push`): bound so that it can be
moved forward (`skip_to`), which the delivery does when it starts consuming again after a
time without any push config (`pusher.Pusher`): what the log gained meanwhile needs no
delivery, and is passed over in one request instead of being fetched and acknowledged.

The move is JetStream's consumer reset (`$JS.API.CONSUMER.RESET`, nats-server 2.14), which
a consumer created to deliver only new messages refuses: the setup step makes it start at a
sequence instead (the log's next one when it is made; `bus.durables.define_durable`, which
replaces one of an older version after its acknowledgement floor, so nothing is skipped).
A server that cannot move it (before 2.14) has the events fetched and acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson

from turnstream.bus.durables import Durable
from turnstream.bus.port import Bus
from turnstream.bus.retry import stoppable

log = logging.getLogger("turnstream.http.push")
RESET_TIMEOUT_S = 5.0


async def stopped_within(stop: asyncio.Event, seconds: float) -> bool:
    """Wait up to `seconds`; True if `stop` was set meanwhile."""
    try:
        async with asyncio.timeout(seconds):
            await stop.wait()
    except TimeoutError:
        return False
    return True


async def bind_when_ready(bus: Bus, durable: Durable, stream: str, stop: asyncio.Event) -> Any:
    """`bind`, once the setup step has made the durable and NATS answers; None if `stop`
    came first."""
    while not stop.is_set():
        try:  # NATS slow: `bound_config` asks again, until `stop`
            return await stoppable(bind(bus, durable, stream), stop)
        except Exception as exc:
            log.info("push delivery waits for its consumer (%s)", exc)
            await stopped_within(stop, 1.0)
    return None


async def bind(bus: Bus, durable: Durable, stream: str) -> Any:
    """Bind to the shared durable pull consumer the setup step made (`bus.durables`:
    starting at the stream's next message when made)."""
    partition = bus.subjects.log_streams.index(stream)
    await bus.bound_config(durable, stream, partition)
    return await bus.pull_bind(durable.name, stream)


async def skip_to(bus: Bus, stream: str, durable: str, seq: int) -> bool:
    """Move the consumer to deliver from `seq` on, if nothing after `seq - 1` was delivered
    yet (so nothing in any replica's hands is delivered again); True if it moved."""
    info = await bus.consumer_info(stream, durable)
    delivered = info.delivered.stream_seq if info.delivered is not None else 0
    if delivered >= seq - 1 or seq <= (info.config.opt_start_seq or 0):
        return False
    try:
        reply = await bus.nc.request(
            f"$JS.API.CONSUMER.RESET.{stream}.{durable}",
            orjson.dumps({"seq": seq}),
            timeout=RESET_TIMEOUT_S,
        )
        error = orjson.loads(reply.data).get("error")
    except Exception as exc:  # no answer: a server before 2.14, or the right not granted
        error = repr(exc)
    if error is not None:  # the events are fetched and acknowledged instead
        log.warning("push delivery: consumer %s not moved to seq %d: %s", durable, seq, error)
        return False
    log.info("push delivery: passed over seq %d-%d", delivered + 1, seq - 1)
    return True
