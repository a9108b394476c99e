"""Connect to NATS and hand out the pieces a service needs (with nats-py's header parse
swapped for ours, `turnstream.bus.headers`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import nats
from nats.aio.client import Client

from turnstream.bus.durables import ensure_durables
from turnstream.bus.headers import install_header_parse
from turnstream.bus.permissions import Refusals
from turnstream.bus.port import Bus
from turnstream.bus.retry import retried
from turnstream.bus.streams import StreamLimits, check_streams, ensure_streams
from turnstream.core.subjects import Subjects

log = logging.getLogger(__name__)
ENSURE_WITHIN_S = 30.0
"""How long the setup step keeps asking for the streams: a cluster that is coming up (no
JetStream meta leader yet) does not answer at first. A service asks until it is answered
(`check_within`)."""


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


async def connect(
    url: str,
    subjects: Subjects,
    *,
    name: str = "turnstream",
    ensure: StreamLimits | None = None,
    check: bool = False,
    connect_timeout: float = 5.0,
    inbox_prefix: str | None = None,
    check_within: float | None = ENSURE_WITHIN_S,
) -> Bus:
    """Connect; with `ensure`, run the setup step (create or update the streams and
    buckets) first; with `check`, `StreamsMissing` unless they exist (a service), asked
    again while NATS does not answer for up to `check_within` seconds (None: until it
    answers). Replies come on `inbox_prefix` (default: the URL's user's own, `inbox_of`).

    A server that refuses the credentials ends the attempt at once with an error naming
    the user (nats-py would otherwise retry forever)."""
    install_header_parse()
    refusals = Refusals(user_of(url))
    nc = await _open(url, name, connect_timeout, inbox_prefix, refusals)
    js = nc.jetstream(publish_async_max_pending=8192)
    try:
        if ensure is not None:
            await _ensure_within(js, subjects, ensure, ENSURE_WITHIN_S, refusals)
        if check:
            await _check_within(js, subjects, check_within, refusals)
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


async def _open(
    url: str, name: str, connect_timeout: float, inbox_prefix: str | None, refusals: Refusals
) -> Client:
    """The connection; `ConnectionError` when the server cannot be reached or refuses the
    credentials (said at once, not retried)."""
    refused: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    user = refusals.user

    async def on_error(exc: Exception) -> None:
        text = str(exc)
        auth = "authorization violation" in text.lower() or "authentication" in text.lower()
        if auth and not refused.done() and not connecting.done():
            refused.set_result(text)  # refused at start: connect() says so and gives up
            return
        refusals.record(text)
        log.error("NATS: %s", text)  # a permissions violation names the subject here

    credentials = urlsplit(url.split(",")[0].strip())
    connecting = asyncio.ensure_future(
        nats.connect(
            [server.strip() for server in url.split(",")],  # a cluster: comma-separated
            # for every server, also those the cluster announces (nats-py would connect
            # to those without the URL's credentials, and be refused)
            user=credentials.username if credentials.password is not None else None,
            password=credentials.password,
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
        return connecting.result()
    except ConnectionError:
        raise
    except Exception as exc:  # nats-py raises several unrelated types here
        raise ConnectionError(
            f"cannot reach NATS at {without_password(url)} ({exc}); start `turnstream up` "
            "or fix TURNSTREAM_NATS_URL / --nats-url"
        ) from exc


async def _ensure_within(
    js: Any,
    subjects: Subjects,
    limits: StreamLimits,
    within: float,
    refusals: Refusals | None = None,
) -> None:
    async def setup() -> None:
        await ensure_streams(js, subjects, limits)
        await ensure_durables(js, subjects, limits.a2a_push_timeout_s)

    await retried("the setup of the streams", _refused_said(setup, refusals), within=within)


async def _check_within(
    js: Any, subjects: Subjects, within: float | None, refusals: Refusals
) -> None:
    check = _refused_said(lambda: check_streams(js, subjects), refusals)
    await retried("the look at the streams", check, within=within)


def _refused_said(
    step: Callable[[], Awaitable[None]], refusals: Refusals | None
) -> Callable[[], Awaitable[None]]:
    """`step`, with a timeout that is the server refusing this user a request (it answers
    nothing) raised as that refusal, which no retry fixes."""

    async def said() -> None:
        try:
            await step()
        except nats.errors.TimeoutError as exc:
            denied = refusals.latest() if refusals is not None else None
            if denied is not None:
                raise denied from exc
            raise

    return said
