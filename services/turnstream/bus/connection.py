"""Connect to NATS and hand out the pieces a service needs.

Also the one place that swaps a nats-py internal for a faster one: the parse of a
message's header lines (`parse_header_lines`), which every delivery to every service
pays, installed by `connect` (`install_header_parse`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import nats
from nats.aio.client import Client

from turnstream.bus.durables import ensure_durables
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


_HEADER_NAMES: dict[bytes, str] = {}
"""Header name bytes as they come (before the strip) -> the key they give; names the
library skips are not kept. Services see a handful of names, so a lookup replaces the
strip, the decode and the per-character whitespace scan of nearly every line."""
_HEADER_NAMES_MAX = 1024
"""Names remembered at most (a peer sending ever new names cannot grow it further)."""


def _header_name(name: bytes) -> str | None:
    """The key of a header line's name part, None when nats-py 2.16 skips the line."""
    try:
        key = name.strip().decode("ascii")
    except UnicodeDecodeError:
        return None
    if any(c.isspace() for c in key):  # str.isspace: also \x1c-\x1f, which bytes' is not
        return None
    return key


def parse_header_lines(raw: bytes) -> dict[str, str]:
    """What nats-py 2.16's `Client._parse_header_lines` returns for `raw`, cheaper: a known
    name costs a dict lookup instead of the strip, decode and a generator over its
    characters (`tests/unit/test_header_parse.py` holds it to the library's results)."""
    out: dict[str, str] = {}
    names = _HEADER_NAMES
    for line in raw.split(b"\r\n"):
        name, colon, value = line.partition(b":")
        if not colon:
            continue
        key = names.get(name)
        if key is None:
            key = _header_name(name)
            if key is None:
                continue
            if len(names) < _HEADER_NAMES_MAX:
                names[name] = key
        out[key] = value.strip().decode("utf-8", "replace")
    return out


_HEADER_SAMPLES = (
    b"Nats-Msg-Id: a\r\nName:Value\r\n\r\n",
    b"bad name: x\r\nno colon\r\n\xc3\xa9: y\r\n:empty\r\nv: \xff\xfe \r\n",
    b"a\x1cb: x\r\n\ta\t: \tz\t\r\nA: 1\r\nA: 2",
)


def _checked_library_parse() -> Callable[[bytes], dict[str, str]] | None:
    """nats-py's own header-line parse, when it is the one `parse_header_lines` copies:
    a static method of `Client` taking `raw` that gives what ours gives on samples that
    take each of its branches; None for any other nats-py."""
    attribute = Client.__dict__.get("_parse_header_lines")
    if not isinstance(attribute, staticmethod):
        return None
    function: Callable[[bytes], dict[str, str]] = attribute.__func__
    try:
        if list(inspect.signature(function).parameters) != ["raw"]:
            return None
        if any(function(raw) != parse_header_lines(raw) for raw in _HEADER_SAMPLES):
            return None
    except Exception:  # whatever a changed library does with them: not the one we copy
        return None
    return function


LIBRARY_HEADER_PARSE = _checked_library_parse()
"""nats-py's parse as it was on import (before any install); None when it is not the one
`parse_header_lines` copies (then it is never replaced)."""


def install_header_parse() -> bool:
    """Have every nats-py client in this process parse header lines with
    `parse_header_lines` (installing again is a no-op); False, and the library's parse
    kept, when nats-py's is not the one it copies."""
    if LIBRARY_HEADER_PARSE is None:
        return False
    Client._parse_header_lines = staticmethod(parse_header_lines)  # type: ignore[method-assign]
    return True


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
