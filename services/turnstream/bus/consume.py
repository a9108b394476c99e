"""Durable pull consumers and the fetch loop every service runs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import api
from nats.js.errors import NotFoundError

log = logging.getLogger("turnstream.bus")
BATCH = 256


async def durable_pull(
    js: Any,
    stream: str,
    durable: str,
    subjects: Sequence[str],
    *,
    ack_wait_s: float = 60,
    max_ack_pending: int = 20_000,
    ack_all: bool = False,
) -> Any:
    """Create or update a shared durable pull consumer and bind to it.

    Every instance of a service binds to the same durable, so adding instances shares
    the work. The definition is applied on every start (a changed filter takes effect).
    """
    config = api.ConsumerConfig(
        durable_name=durable,
        filter_subjects=list(subjects),
        ack_policy=api.AckPolicy.ALL if ack_all else api.AckPolicy.EXPLICIT,
        ack_wait=ack_wait_s,
        max_ack_pending=max_ack_pending,
    )
    await js.add_consumer(stream, config=config)
    return await js.pull_subscribe_bind(durable, stream=stream)


async def fetch_loop(
    sub: Any,
    stop: asyncio.Event,
    on_batch: Callable[[list[Any]], Awaitable[None]],
    *,
    batch: int = BATCH,
) -> None:
    """Fetch until `stop` is set; a fetch that fails (a reconnect) is retried."""
    try:
        while not stop.is_set():
            try:
                msgs = await sub.fetch(batch, timeout=0.5)
            except (TimeoutError, NatsTimeoutError):
                continue
            except NatsError as exc:  # disconnected: nats-py reconnects, we retry
                log.warning("fetch failed (%s); retrying", exc)
                await asyncio.sleep(0.5)
                continue
            await on_batch(msgs)
    finally:
        await sub.unsubscribe()


async def durable_push(
    js: Any,
    stream: str,
    durable: str,
    deliver_subject: str,
    subjects: Sequence[str],
    on_msg: Callable[[Any], Awaitable[None]],
    *,
    ack_wait_s: float = 60,
    max_ack_pending: int = 20_000,
    ack_all: bool = False,
    start_seq: int | None = None,
) -> Any:
    """Create or update a shared durable push consumer (a deliver group) and subscribe.

    A push consumer hands each message over as soon as it is stored: a pull `fetch` costs
    a request (and, when idle, a no-wait probe) per wake-up, ~0.3 ms more per hop here
    (bench/consumers.py). Instances of a service join the same deliver group and share the
    work. A pull consumer of the same name from an older version is replaced, resuming
    after its ack floor so nothing is processed twice or skipped.

    `ack_all`: one ack covers every earlier message (a single in-order reader that acks
    once per batch). A consumer created with the other ack policy is replaced the same way.
    `start_seq`: where a consumer created now starts (one that exists goes on as it was).
    """
    config = api.ConsumerConfig(
        durable_name=durable,
        deliver_subject=deliver_subject,
        deliver_group=durable,
        filter_subjects=list(subjects),
        ack_policy=api.AckPolicy.ALL if ack_all else api.AckPolicy.EXPLICIT,
        ack_wait=ack_wait_s,
        max_ack_pending=max_ack_pending,
    )
    try:
        existing = await js.consumer_info(stream, durable)
    except NotFoundError:
        existing = None
    if existing is not None and (
        existing.config.deliver_subject is None or existing.config.ack_policy != config.ack_policy
    ):
        floor = existing.ack_floor.stream_seq if existing.ack_floor else 0
        log.warning("replacing consumer %s (another kind) after seq %d", durable, floor)
        await js.delete_consumer(stream, durable)
        config.deliver_policy = api.DeliverPolicy.BY_START_SEQUENCE
        config.opt_start_seq = floor + 1
    elif existing is not None:  # where it started is fixed for its lifetime
        config.deliver_policy = existing.config.deliver_policy
        config.opt_start_seq = existing.config.opt_start_seq
    elif start_seq is not None:
        config.deliver_policy = api.DeliverPolicy.BY_START_SEQUENCE
        config.opt_start_seq = start_seq
    await js.add_consumer(stream, config=config)
    return await js.subscribe_bind(
        stream=stream,
        config=config,
        consumer=durable,
        cb=on_msg,
        manual_ack=True,
        pending_msgs_limit=max_ack_pending + 1000,
        pending_bytes_limit=1024 * 1024 * 1024,
    )


@contextlib.asynccontextmanager
async def kept_in_progress(msgs: Sequence[Any], ack_wait_s: float) -> AsyncIterator[None]:
    """While the block runs, tell JetStream `msgs` are still being worked on (three times per
    ack wait), so a consumer can have a short ack wait: a holder that dies has its messages
    redelivered soon, while one that is merely slow keeps them."""

    async def beat() -> None:
        while True:
            await asyncio.sleep(ack_wait_s / 3)
            for msg in msgs:
                try:
                    await msg.in_progress()
                except Exception as exc:  # disconnected: the next beat (or a redelivery) will do
                    log.warning("in-progress ack failed: %s", exc)
                    break

    task = asyncio.create_task(beat(), name="in-progress")
    try:
        yield
    finally:
        task.cancel()
