"""Ordered consumers (the log read in order, then followed), named by us.

nats-server lets the bare `$JS.API.CONSUMER.CREATE.<stream>` subject (where an unnamed
consumer's create goes) redefine any consumer named in the request's body, another
service's durable included (seen on 2.15.1: its filter changed, its durable name gone). So
no user may publish to the bare subject of a stream with durables (ops/accounts.conf): a
reader names its consumer in the subject (`$JS.API.CONSUMER.CREATE.<stream>.<name>[.…]`,
where the server takes the subject's name), and the durables' names are denied there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from nats.js import api
from nats.nuid import NUID

_nuid = NUID()


def ephemeral_name() -> str:
    """A name no durable has (they are words: bus/durables.py)."""
    return f"eph_{_nuid.next().decode()}"


async def ordered_subscribe(
    js: Any,
    subject: str | None,
    *,
    stream: str,
    cb: Callable[[Any], Awaitable[None]],
    config: api.ConsumerConfig | None = None,
    **options: Any,
) -> Any:
    """`js.subscribe(…, ordered_consumer=True)` with a consumer named by `ephemeral_name`,
    named anew each time nats-py makes it again (a gap or a missed heartbeat): the one
    before may still be there until its inactivity ends, and a create of the same name
    with another start would be refused."""
    config = config or api.ConsumerConfig()
    config.name = ephemeral_name()
    sub = await js.subscribe(
        subject, stream=stream, cb=cb, ordered_consumer=True, config=config, **options
    )
    jsi = sub._sub._jsi  # nats-py 2.x keeps the consumer request here (pinned <3)
    reset = jsi.reset_ordered_consumer

    async def renamed_reset(sseq: int | None) -> bool:
        jsi._ccreq.name = ephemeral_name()
        return bool(await reset(sseq))

    jsi.reset_ordered_consumer = renamed_reset
    return sub
