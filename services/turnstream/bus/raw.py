"""A subscription whose messages are handed over as the connection parses them: no `Msg`,
no header dict, no queue, no task.

For each message of a subscription with a callback, nats-py parses its header lines into
a dict, builds a `Msg`, puts it on an `asyncio.Queue`, and a task per subscription takes
it off and awaits the callback's coroutine. A reader that wants only the bytes (the
audit's intake: some 22 log events a one-tool turn, each its own delivery) pays more for
that than for reading them (`bench/turns.py`'s profile of the audit: 40% of its CPU).

`raw_subscribe` wraps the connection's `_process_msg` (what its parser calls for each
MSG and HMSG) once: a message to a raw subscription goes to its handler at once, as a
`Delivery` whose headers are parsed only if asked for; every other message takes nats-py's
path. That wrap is made only when nats-py's `_process_msg` takes the arguments this was
written against (`LIBRARY_ROUTE`); otherwise the subscription's ordinary callback hands
over the same `Delivery`s, slower.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

from nats.aio.client import Client

from turnstream.bus.headers import parse_header_lines

log = logging.getLogger("turnstream.bus")
_STATUS_LINE = b"NATS/1.0"


class Delivery:
    """One message as it came: subject, reply subject, payload and headers."""

    __slots__ = ("_headers", "_raw_headers", "data", "reply", "subject")

    def __init__(
        self,
        subject: str,
        reply: str,
        data: bytes,
        raw_headers: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.subject = subject
        self.reply = reply
        """Empty for a status message (the end of a pull request)."""
        self.data = data
        self._raw_headers = raw_headers
        self._headers = headers

    @property
    def headers(self) -> dict[str, str] | None:
        """The header lines (and a status line's code as `Status`), parsed when asked for."""
        raw = self._raw_headers
        if self._headers is None and raw:
            status_line, _, lines = raw.partition(b"\r\n")
            headers = parse_header_lines(lines)
            status = status_line[len(_STATUS_LINE) :].split(None, 1)
            if status and status[0].isdigit():
                headers["Status"] = status[0].decode()
                if len(status) > 1:
                    headers["Description"] = status[1].decode("utf-8", "replace")
            self._headers = headers or None
        return self._headers

    @property
    def status(self) -> str:
        """A status message's code (`404`, `408`, `409`, …); empty for any other message."""
        return (self.headers or {}).get("Status", "")


Handler = Callable[[Delivery], None]


def _checked_library_route() -> bool:
    """Whether nats-py's `Client._process_msg` is the coroutine this wraps, taking
    `(sid, subject, reply, data, headers)` as its parser passes them."""
    function = Client.__dict__.get("_process_msg")
    if not inspect.iscoroutinefunction(function):
        return False
    names = list(inspect.signature(function).parameters)
    return names == ["self", "sid", "subject", "reply", "data", "headers"]


LIBRARY_ROUTE = _checked_library_route()


class RawSubscription:
    def __init__(self, nc: Any, sub: Any, routed: bool) -> None:
        self.nc = nc
        self.sub = sub
        self.routed = routed
        """Messages come at once from the parse (False: through nats-py's callback)."""

    async def unsubscribe(self) -> None:
        self.nc.__dict__.get(_ROUTES, {}).pop(self.sub._id, None)
        await self.sub.unsubscribe()


async def raw_subscribe(nc: Any, subject: str, handler: Handler) -> RawSubscription:
    """Subscribe to `subject`, each message handed to `handler` as a `Delivery` in the
    order they come (`handler` must not block: it runs inside the connection's read).
    Subscribe before asking for anything: a message that came before this returned would
    go through the callback, after those that come later."""

    async def fallback(msg: Any) -> None:
        handler(Delivery(msg.subject, msg.reply, msg.data, headers=msg.headers))

    sub = await nc.subscribe(subject, cb=fallback)
    if not LIBRARY_ROUTE:
        return RawSubscription(nc, sub, False)
    _routes(nc)[sub._id] = handler
    return RawSubscription(nc, sub, True)


_ROUTES = "_turnstream_raw_routes"
"""The connection's attribute holding its raw subscriptions' handlers by sid."""


def _routes(nc: Any) -> dict[int, Handler]:
    """The connection's raw routes; its messages are routed by them from the first call."""
    routes: dict[int, Handler] | None = nc.__dict__.get(_ROUTES)
    if routes is None:
        routes = {}
        _install(nc, routes)
        setattr(nc, _ROUTES, routes)
    return routes


def _install(nc: Any, routes: dict[int, Handler]) -> None:
    """Send a message whose sid is in `routes` to its handler, any other to nats-py."""
    library = nc._process_msg
    stats = nc.stats

    async def process_msg(
        sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        handler = routes.get(sid)
        if handler is None:
            await library(sid, subject, reply, data, headers)
            return
        stats["in_msgs"] += 1
        stats["in_bytes"] += len(data)
        try:
            handler(Delivery(subject.decode(), reply.decode(), data, headers))
        except Exception:  # the connection's read loop must go on
            log.exception("a raw subscription's handler failed")

    nc._process_msg = process_msg
