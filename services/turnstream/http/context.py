"""What every route needs (the bus, the hub, the authenticator, the options) and the
FastAPI dependencies that hand it out: the caller's `Principal` and a checked session id."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from turnstream.bus import Bus
from turnstream.core.costs import PriceTable
from turnstream.core.subjects import is_session_id
from turnstream.http.auth import Authenticator, Principal
from turnstream.http.hub import Hub
from turnstream.http.problems import invalid_input
from turnstream.http.storage import Storage
from turnstream.settings import Settings


@dataclass
class Options:
    """Knobs of the HTTP face (tests shorten them)."""

    accept_timeout_s: float = 10.0
    """How long a POST waits for the gateway's verdict before answering 504."""
    wait_default_s: float = 30.0
    """`?wait=true` waits this long for `TurnEnded` unless `?timeout=` says otherwise."""
    wait_max_s: float = 300.0
    ping_s: float = 15.0
    """A comment line on an idle SSE stream this often (keeps proxies from closing it)."""
    retry_ms: tuple[int, int] = (1_000, 5_000)
    """The reconnection delay a stream asks its client for (`retry:`), drawn at random in
    this range for each stream: when a restart closes every open stream, their clients come
    back spread over it, not all in the same instant (a browser's default is one delay,
    ~3 s, for all)."""
    ticket_ttl_s: float = 60.0
    replay_page: int = 500


@dataclass
class HttpContext:
    settings: Settings
    bus: Bus
    hub: Hub
    auth: Authenticator
    options: Options
    storage: Storage
    prices: PriceTable = field(default_factory=dict)
    """The price table (`TURNSTREAM_PRICES` over the defaults): sessions' spend in dollars."""


async def context(request: Request) -> HttpContext:
    ctx: HttpContext = request.app.state.ctx
    return ctx


Ctx = Annotated[HttpContext, Depends(context)]


BEARER = HTTPBearer(auto_error=False, description="An API key from the keys file")


def _principal(
    request: Request, ctx: HttpContext, creds: HTTPAuthorizationCredentials | None
) -> Principal:
    client = request.client.host if request.client else None
    authorization = request.headers.get("authorization") if creds is None else None
    value = f"Bearer {creds.credentials}" if creds is not None else authorization
    who = ctx.auth.principal(value, client)
    request.state.principal = who.name  # for the access log: a name, never a key
    return who


async def principal(
    request: Request,
    ctx: Ctx,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)] = None,
) -> Principal:
    return _principal(request, ctx, creds)


Caller = Annotated[Principal, Depends(principal)]


async def session_id(
    id: Annotated[str, Path(description="Session id: 1-128 of [A-Za-z0-9_:-]")],
) -> str:
    if not is_session_id(id):
        raise invalid_input(f"session id {id!r} must be 1-128 of [A-Za-z0-9_:-]")
    return id


SessionId = Annotated[str, Depends(session_id)]


@dataclass(frozen=True, slots=True)
class SessionCall:
    """A call on one session: the context, the caller, the checked session id."""

    ctx: HttpContext
    who: Principal
    session: str


async def session_call(
    request: Request,
    id: Annotated[str, Path(description="Session id: 1-128 of [A-Za-z0-9_:-]")],
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)] = None,
) -> SessionCall:
    """`Ctx`, `Caller` and `SessionId` as one dependency (the caller checked first, as
    there): FastAPI's cost is per dependency, and the POST routes are the hot path."""
    ctx: HttpContext = request.app.state.ctx
    who = _principal(request, ctx, creds)
    return SessionCall(ctx, who, await session_id(id))


OnSession = Annotated[SessionCall, Depends(session_call)]
