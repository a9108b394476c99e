"""Durable pull consumers and the fetch loop every service runs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import api

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
) -> Any:
    """Create or update a shared durable pull consumer and bind to it.

    Every instance of a service binds to the same durable, so adding instances shares
    the work. The definition is applied on every start (a changed filter takes effect).
    """
    config = api.ConsumerConfig(
        durable_name=durable,
        filter_subjects=list(subjects),
        ack_policy=api.AckPolicy.EXPLICIT,
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
