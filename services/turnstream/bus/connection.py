"""Connect to NATS and hand out the pieces a service needs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import nats
from nats.aio.client import Client

from turnstream.bus.kv import cannot_place
from turnstream.bus.permissions import Refusals
from turnstream.bus.store import JetStreamEventStore
from turnstream.bus.streams import StreamLimits, check_streams, ensure_streams
from turnstream.core.subjects import Subjects

log = logging.getLogger(__name__)
ENSURE_WITHIN_S = 30.0
"""How long a starting service keeps asking for its streams: a cluster that is coming up
(no JetStream meta leader yet) does not answer at first."""


def without_password(url: str) -> str:
    """`url` (comma-separated servers) with any password replaced by `***`."""
    shown = []
    for server in url.split(","):
        parts = urlsplit(server.strip())
        if parts.password is not None:
            server = server.replace(f":{parts.password}@", ":***@", 1)
        shown.append(server.strip())
    return ",".join(shown)


def user_of(url: str) -> str | None:
    return urlsplit(url.split(",")[0].strip()).username


def inbox_of(user: str | None) -> str:
    """A user's own inbox prefix (`_INBOX.<user>`): ops/accounts.conf lets each user
    subscribe to its own alone, so no other user hears its replies."""
    return f"_INBOX.{user}" if user else "_INBOX"


@dataclass
class Bus:
    """One NATS connection with its JetStream context and the event store over it."""

    nc: Client
    js: Any
    subjects: Subjects
    refusals: Refusals = field(default_factory=lambda: Refusals(None))
    """What the server refused this connection's user (a publish, a subscription)."""
    store: JetStreamEventStore = field(init=False)
    _blobs: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.store = JetStreamEventStore(self.nc, self.js, self.subjects)

    async def blobs(self) -> Any:
        """The object store of large results and archived sessions (looked up once)."""
        if self._blobs is None:
            self._blobs = await self.js.object_store(self.subjects.blobs_bucket)
        return self._blobs

    async def close(self) -> None:
        """Drain and close; with the broker away (no drain possible), just close."""
        if self.nc.is_closed:
            return
        if self.nc.is_connecting or self.nc.is_reconnecting:
            # nats-py writes what it buffered for the server to the lost socket on close
            # and raises for it; the connection is closed all the same
            with contextlib.suppress(OSError):
                await self.nc.close()
            return
        await self.nc.drain()


async def connect(
    url: str,
    subjects: Subjects,
    *,
    name: str = "turnstream",
    ensure: StreamLimits | None = None,
    check: bool = False,
    connect_timeout: float = 5.0,
    inbox_prefix: str | None = None,
) -> Bus:
    """Connect; with `ensure`, run the setup step (create or update the streams and
    buckets) first; with `check`, `StreamsMissing` unless they exist (a service). Replies
    come on `inbox_prefix` (default: the URL's user's own, `inbox_of`).

    A server that refuses the credentials ends the attempt at once with an error naming
    the user (nats-py would otherwise retry forever)."""
    refused: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    user = user_of(url)
    refusals = Refusals(user)

    async def on_error(exc: Exception) -> None:
        text = str(exc)
        auth = "authorization violation" in text.lower() or "authentication" in text.lower()
        if auth and not refused.done() and not connecting.done():
            refused.set_result(text)  # refused at start: connect() says so and gives up
            return
        refusals.record(text)
        log.error("NATS: %s", text)  # a permissions violation names the subject here

    connecting = asyncio.ensure_future(
        nats.connect(
            [server.strip() for server in url.split(",")],  # a cluster: comma-separated
            name=name,
            connect_timeout=connect_timeout,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            pending_size=64 * 1024 * 1024,
            allow_reconnect=True,
            error_cb=on_error,
            inbox_prefix=inbox_prefix or inbox_of(user),
        )
    )
    try:
        waiting: set[asyncio.Future[Any]] = {connecting, refused}
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if refused.done() and not connecting.done():
            connecting.cancel()
            raise ConnectionError(
                f"NATS at {without_password(url)} refused user {user or '(none)'!r}: "
                f"{refused.result()} (wrong password for this user, or no such user: check "
                "TURNSTREAM_NATS_USER / TURNSTREAM_NATS_PASSWORD, the secrets file, or the "
                "credentials in TURNSTREAM_NATS_URL)"
            )
        nc = connecting.result()
    except ConnectionError:
        raise
    except Exception as exc:  # nats-py raises several unrelated types here
        raise ConnectionError(
            f"cannot reach NATS at {without_password(url)} ({exc}); start `turnstream up` "
            "or fix TURNSTREAM_NATS_URL / --nats-url"
        ) from exc
    js = nc.jetstream(publish_async_max_pending=8192)
    try:
        if ensure is not None:
            await _ensure_within(js, subjects, ensure, ENSURE_WITHIN_S, refusals)
        if check:
            await _check_within(js, subjects, ENSURE_WITHIN_S, refusals)
    except nats.errors.TimeoutError as exc:
        await nc.close()
        denied = refusals.latest()  # not a slow cluster: this user may not ask that
        if denied is not None:
            raise denied from exc
        raise
    except BaseException:
        await nc.close()
        raise
    return Bus(nc, js, subjects, refusals)


async def _ensure_within(
    js: Any,
    subjects: Subjects,
    limits: StreamLimits,
    within: float,
    refusals: Refusals | None = None,
) -> None:
    await _within(lambda: ensure_streams(js, subjects, limits), within, refusals)


async def _check_within(js: Any, subjects: Subjects, within: float, refusals: Refusals) -> None:
    await _within(lambda: check_streams(js, subjects), within, refusals)


async def _within(
    step: Callable[[], Awaitable[None]], within: float, refusals: Refusals | None
) -> None:
    """`step`, asked again while JetStream times out or cannot place replicas yet (a
    cluster coming up), for up to `within`; not when the server refused this user."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        try:
            await step()
            return
        except Exception as exc:  # StreamsMissing and the like: not a slow cluster
            if not isinstance(exc, nats.errors.TimeoutError) and not cannot_place(exc):
                raise
            if refusals is not None and refusals.latest() is not None:
                raise
            if asyncio.get_running_loop().time() > deadline:
                raise
            log.warning("JetStream cannot set up the streams yet (%s); asking again", exc)
            await asyncio.sleep(0.5)
