"""The push delivery's durable consumer on the log (`a2a-push`): bound so that it can be
moved forward (`skip_to`), which the delivery does when it starts consuming again after a
time without any push config (`pusher.Pusher`): what the log gained meanwhile needs no
delivery, and is passed over in one request instead of being fetched and acknowledged.

The move is JetStream's consumer reset (`$JS.API.CONSUMER.RESET`, nats-server 2.14), which
a consumer created to deliver only new messages refuses: the consumer starts at a sequence
instead (the log's next one when it is created, as before). One made by an older version
(deliver new) is replaced once, after its acknowledgement floor, so nothing is skipped.
A server that cannot move it (before 2.14) has the events fetched and acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import orjson
from nats.js import api
from nats.js.errors import NotFoundError

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


async def bind_when_ready(
    js: Any,
    stream: str,
    durable: str,
    subjects: Sequence[str],
    stop: asyncio.Event,
    *,
    ack_wait_s: float,
    max_ack_pending: int,
) -> Any:
    """`bind`, once the log stream exists (the setup step creates it) and NATS answers;
    None if `stop` came first."""
    while not stop.is_set():
        try:
            return await bind(
                js,
                stream,
                durable,
                subjects,
                ack_wait_s=ack_wait_s,
                max_ack_pending=max_ack_pending,
            )
        except Exception as exc:
            log.info("push delivery waits for the log (%s)", exc)
            await stopped_within(stop, 1.0)
    return None


async def bind(
    js: Any,
    stream: str,
    durable: str,
    subjects: Sequence[str],
    *,
    ack_wait_s: float,
    max_ack_pending: int,
) -> Any:
    """Create or update the shared durable pull consumer (starting at the stream's next
    message when created) and bind to it."""
    config = api.ConsumerConfig(
        durable_name=durable,
        deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
        filter_subjects=list(subjects),
        ack_policy=api.AckPolicy.EXPLICIT,
        ack_wait=ack_wait_s,
        max_ack_pending=max_ack_pending,
    )
    try:
        existing = await js.consumer_info(stream, durable)
    except NotFoundError:
        existing = None
    if existing is None:
        config.opt_start_seq = int((await js.stream_info(stream)).state.last_seq) + 1
    elif existing.config.deliver_policy != api.DeliverPolicy.BY_START_SEQUENCE:
        floor = existing.ack_floor.stream_seq if existing.ack_floor else 0
        log.warning(
            "replacing consumer %s (it cannot be moved forward) after seq %d", durable, floor
        )
        await js.delete_consumer(stream, durable)
        config.opt_start_seq = floor + 1
    else:  # where it started is fixed for its lifetime
        config.opt_start_seq = existing.config.opt_start_seq
    await js.add_consumer(stream, config=config)
    return await js.pull_subscribe_bind(durable, stream=stream)


async def skip_to(nc: Any, js: Any, stream: str, durable: str, seq: int) -> bool:
    """Move the consumer to deliver from `seq` on, if nothing after `seq - 1` was delivered
    yet (so nothing in any replica's hands is delivered again); True if it moved."""
    info = await js.consumer_info(stream, durable)
    if info.delivered.stream_seq >= seq - 1 or seq <= (info.config.opt_start_seq or 0):
        return False
    try:
        reply = await nc.request(
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
    log.info("push delivery: passed over seq %d-%d", info.delivered.stream_seq + 1, seq - 1)
    return True
