"""Asking NATS again: the one retry every service uses on its start and resume path.

A NATS hiccup (a request not answered in time, the connection dropped or reconnecting,
JetStream without a leader for a moment, a cluster that cannot place replicas yet) is not
a reason for a service to exit (docs/operations.md). `retried` asks again, waiting
`FIRST_S`, doubling up to `MAX_S`, and logs a WARNING naming what it waits for; anything
else (a stream or durable missing, a permission refused) is raised at once, since waiting
does not fix it. `stoppable` ends a wait like that when the service is told to stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from nats import errors
from nats.js.errors import APIError, BadRequestError, ServiceUnavailableError

log = logging.getLogger("turnstream.bus")
T = TypeVar("T")
FIRST_S = 0.5
"""The first wait before asking again."""
MAX_S = 5.0
"""The longest wait between two tries (the waits double up to it)."""
NO_PLACEMENT = 10005
"""JetStream's `no suitable peers for placement`: a cluster with a peer not (yet) online."""
UNAVAILABLE = 10008
"""JetStream's `JetStream system temporarily unavailable` (no meta leader for a moment)."""
_HICCUPS = (
    TimeoutError,  # nats' TimeoutError is asyncio's, which is the builtin one
    ServiceUnavailableError,  # no responders to a JetStream request
    errors.ConnectionClosedError,
    errors.ConnectionReconnectingError,
    errors.StaleConnectionError,  # UnexpectedEOF too
    errors.NoRespondersError,
    errors.OutboundBufferLimitError,
    ConnectionError,  # the socket reset, refused, or NATS not reachable
)


def cannot_place(exc: BaseException) -> bool:
    """A cluster cannot place a stream's or bucket's replicas yet (a node joining or
    restarting): worth asking again."""
    return isinstance(exc, BadRequestError) and exc.err_code == NO_PLACEMENT


def hiccup(exc: BaseException) -> bool:
    """Whether `exc` is NATS slow or away for a while (worth asking again), not an answer."""
    if isinstance(exc, _HICCUPS):
        return True
    return cannot_place(exc) or (isinstance(exc, APIError) and exc.err_code == UNAVAILABLE)


async def retried(
    what: str,
    step: Callable[[], Awaitable[T]],
    *,
    within: float | None = None,
    retry_on: Callable[[BaseException], bool] = hiccup,
) -> T:
    """`step()`, asked again while it raises a hiccup (`retry_on`), with a WARNING naming
    `what` it waits for and a wait that doubles from `FIRST_S` up to `MAX_S`. With
    `within`, the hiccup is raised once that many seconds have passed; without, it asks
    until it is answered (wrap it in `stoppable` to end the wait at a stop)."""
    loop = asyncio.get_running_loop()
    deadline = None if within is None else loop.time() + within
    wait = FIRST_S
    while True:
        try:
            return await step()
        except Exception as exc:
            if not retry_on(exc):
                raise
            if deadline is not None and loop.time() + wait > deadline:
                raise
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                # cancelled, and the cancellation swallowed by a reply that came with it
                # (nats-py's `wait_for` on Python 3.11): stop asking
                raise asyncio.CancelledError from exc
            log.warning("NATS: %s not answered (%r); asking again in %.1f s", what, exc, wait)
            await asyncio.sleep(wait)
            wait = min(wait * 2, MAX_S)


async def stoppable(work: Awaitable[T], stop: asyncio.Event) -> T | None:
    """`work`'s result, or None if `stop` is set first (`work` is then cancelled)."""
    if stop.is_set():
        if asyncio.iscoroutine(work):
            work.close()  # never started: no "never awaited" warning
        return None
    doing = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([doing, stopping], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        if not doing.done():
            doing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await doing
    if doing.cancelled():
        return None
    return doing.result()
