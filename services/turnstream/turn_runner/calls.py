"""The messages a turn delivers to other sessions (the model calls: `model_calls`)."""

from __future__ import annotations

import asyncio
import logging

from turnstream.bus.permissions import PermissionDenied
from turnstream.core.session.decider import (
    Input,
    Published,
)
from turnstream.core.session.outbound import Outbound
from turnstream.turn_runner.context import ActorContext

log = logging.getLogger("turnstream.turn_runner")


async def deliver(ctx: ActorContext, session_id: str, messages: tuple[Outbound, ...]) -> Input:
    """Publish each message to its session's inbound subject, its key as `Nats-Msg-Id`
    (a redo after a crash is deduplicated there); recorded once all are acknowledged,
    or refused by the server (then never sent: asking again would be refused again)."""
    publish = ctx.publish_inbound
    outcomes = await asyncio.gather(
        *(publish(m.to, m.payload(), m.key) for m in messages), return_exceptions=True
    )
    refused: list[tuple[str, str]] = []
    for message, outcome in zip(messages, outcomes, strict=True):
        if isinstance(outcome, PermissionDenied):
            log.error("%s: %s", session_id, outcome)
            refused.append((message.key, str(outcome)))
        elif isinstance(outcome, BaseException):
            raise outcome
    done = frozenset(m.key for m in messages) - {key for key, _ in refused}
    return Published(done, tuple(refused))
