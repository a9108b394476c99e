"""The HTTP face (DESIGN §12): one FastAPI app over the same subjects as any gateway.

`create_app` wires it (a bus of its own unless one is given, the hub, the keys); `serve`
runs it under uvicorn until `stop` is set, ending open SSE streams first so clients resume
elsewhere; `main` is `python -m turnstream.http` (what `turnstream up` starts).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from turnstream import console
from turnstream.bus import Bus
from turnstream.bus.errors import NotFound
from turnstream.http import a2a, commands, docs, downloads, reads, replay, sse
from turnstream.http.auth import Authenticator, check_bind, load_keys
from turnstream.http.context import Caller, Ctx, HttpContext, Options, session_id
from turnstream.http.fast import FastPaths
from turnstream.http.hub import Hub
from turnstream.http.problems import BodyLimit, Problem, install
from turnstream.http.storage import Storage
from turnstream.http.uploads import Uploads
from turnstream.prices import load_prices
from turnstream.runtime import connect_client, loop_factory, source_name, tune_gc
from turnstream.runtime.redaction import redact_logs
from turnstream.settings import Settings

log = logging.getLogger("turnstream.http")
TICKET_SECRET = "TURNSTREAM_HTTP_TICKET_SECRET"


def create_app(
    settings: Settings, *, bus: Bus | None = None, options: Options | None = None
) -> FastAPI:
    """The app; `bus` shares a connection (tests), else it opens its own at startup."""
    keys = load_keys(settings.http_keys_file) if settings.http_keys_file else None
    auth = Authenticator(keys, settings.secret(TICKET_SECRET))
    opts = options or Options()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        own = bus is None
        # a client, not a service: it creates no stream (its NATS user may not; the
        # services do), only the A2A task bucket when first needed
        the_bus = bus or await connect_client(settings, "http")
        hub = Hub(the_bus)  # subscribes when the first stream or POST needs it
        prices = load_prices(settings.prices)
        storage = Storage(the_bus)
        app.state.ctx = HttpContext(settings, the_bus, hub, auth, opts, storage, prices)
        try:
            async with a2a.delivering(the_bus, settings, source_name("http")):
                yield
        finally:
            await hub.stop()
            if own:
                await the_bus.close()

    app = App(
        settings.max_input_bytes,
        title="turnstream",
        summary="LLM agent turns as event-sourced services: send, stream, approve over HTTP",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,  # docs.mount: the same page, its assets served from a package
        redoc_url=None,
    )
    install(app)
    docs.mount(app)
    app.include_router(commands.router)
    app.include_router(reads.router)
    app.include_router(sse.router)
    app.include_router(replay.router)
    app.include_router(downloads.router)
    app.add_api_route("/v1/tickets", tickets, methods=["POST"], tags=["auth"])
    app.add_api_route("/healthz", healthz, methods=["GET"], tags=["ops"])
    app.add_api_route("/readyz", readyz, methods=["GET"], tags=["ops"])
    a2a.mount(app)  # /a2a and /.well-known/agent-card.json
    console.mount(app)  # the web console at / (static files, a client of the routes above)
    return app


class App(FastAPI):
    """FastAPI with the face's own layers outermost: the access log, multipart messages
    (streamed, before the body limit: `uploads`), the body limit, and
    the hot POST and stream (`FastPaths`), which so skip FastAPI's per-request machinery
    and its own middleware (error pages, telemetry, body limit) as well as its routing."""

    def __init__(self, max_input_bytes: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_input_bytes = max_input_bytes

    def build_middleware_stack(self) -> ASGIApp:
        routes = super().build_middleware_stack()
        return AccessLog(Uploads(BodyLimit(FastPaths(routes), max_bytes=self.max_input_bytes)))


class TicketIn(BaseModel):
    sessionId: str


class Ticket(BaseModel):
    ticket: str
    expiresAt: int
    """Unix seconds."""


async def tickets(ctx: Ctx, who: Caller, body: TicketIn) -> Ticket:
    """A short-lived ticket to open one session's stream with `?ticket=` (EventSource)."""
    session = await session_id(body.sessionId)
    who.require("read", session)
    ticket, expires = ctx.auth.issue_ticket(who, session, ctx.options.ticket_ttl_s)
    return Ticket(ticket=ticket, expiresAt=expires)


async def healthz() -> dict[str, str]:
    """Liveness: the process answers."""
    return {"status": "ok"}


async def readyz(ctx: Ctx) -> Response:
    """Readiness: NATS connected and the streams present; and the storage (`full`: the
    log or the inbound stream at its limit, or the face's publishes refused for it)."""
    bus = ctx.bus
    problems = []
    if not bus.nc.is_connected:
        problems.append("not connected to NATS")
    else:
        for stream in (bus.subjects.inbound_stream, *bus.subjects.log_streams):
            try:
                await bus.stream_info(stream)
            except NotFound:
                problems.append(f"stream {stream} missing")
            except Exception as exc:
                problems.append(f"stream {stream}: {type(exc).__name__}")
    if problems:
        raise Problem(503, "not_ready", "Not ready", "; ".join(problems))
    try:  # ready to serve reads even when full: the storage is said, not a readiness fault
        storage = await ctx.storage.read()
    except Exception as exc:
        storage = {"full": None, "error": f"{type(exc).__name__}: {exc}"}
    return JSONResponse(
        {
            "status": "ready",
            "storage": storage,
            "feeds": ctx.hub.open_feeds,
            "following": ctx.hub.following,
            "natsSubscriptions": len(bus.nc._subs),  # the hub's consumers, live, direct gets
        }
    )


class AccessLog:
    """One line per request: method, path (never the query: a ticket rides there), status,
    the key's name (never its value), milliseconds."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [0]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            who = scope.get("state", {}).get("principal", "-")
            ms = (time.perf_counter() - start) * 1000
            log.info("%s %s %s %s %.1fms", scope["method"], scope["path"], status[0], who, ms)


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self.app = app

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # signals are the caller's (`run_service` sets `stop`)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        ctx: HttpContext | None = getattr(self.app.state, "ctx", None)
        if ctx is not None:
            ctx.hub.close_feeds()  # open streams end now, not at the graceful timeout
        await super().shutdown(sockets)


def parse_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"HTTP address {addr!r} must be host:port (TURNSTREAM_HTTP_ADDR)")
    return host.strip("[]") or "127.0.0.1", int(port)


def bind(addr: str, has_keys: bool) -> socket.socket:
    """A listening socket on `addr` (port 0: a free one), refused off loopback without keys."""
    host, port = parse_addr(addr)
    check_bind(host, has_keys)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP spelled out: asyncio sets TCP_NODELAY on accepted sockets only when their
    # proto says TCP, and without it a keep-alive response waits ~40 ms for a delayed ACK
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


async def serve(
    settings: Settings,
    stop: asyncio.Event,
    *,
    bus: Bus | None = None,
    options: Options | None = None,
    sock: socket.socket | None = None,
    on_ready: Any = None,
) -> None:
    """Serve until `stop` is set. `sock`: an already bound socket (tests bind port 0)."""
    sock = sock or bind(settings.http_addr, settings.http_keys_file is not None)
    app = create_app(settings, bus=bus, options=options)
    host, port = sock.getsockname()[:2]
    if settings.http_keys_file is None:
        log.warning("no TURNSTREAM_HTTP_KEYS_FILE: serving loopback only, without keys")
    # uvicorn's access log prints the query string, where a ticket rides: ours (AccessLog)
    # leaves it out
    logging.getLogger("uvicorn.access").disabled = True
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=5,
        ws="none",
    )
    server = _Server(config, app)
    task = asyncio.create_task(server.serve([sock]))
    try:
        while not server.started and not task.done():  # noqa: ASYNC110 (uvicorn: a flag only)
            await asyncio.sleep(0.02)
        if server.started:
            log.info("turnstream http on http://%s:%s (docs: /docs)", host, port)
            if on_ready is not None:
                on_ready(f"http://{host}:{port}")
        stop_wait = asyncio.create_task(stop.wait())
        await asyncio.wait([task, stop_wait], return_when=asyncio.FIRST_COMPLETED)
        stop_wait.cancel()
        server.should_exit = True
        await task
    finally:
        if not task.done():
            task.cancel()


CANNOT_SERVE = 3
"""Exit code when the address is refused or taken: `turnstream up` does not restart it."""


def run(settings: Settings) -> None:
    """Serve until SIGINT/SIGTERM; an address that cannot be served exits `CANNOT_SERVE`."""
    logging.basicConfig(
        level=os.environ.get("TURNSTREAM_LOG_LEVEL", "INFO"),
        format="%(asctime)s http %(levelname)s %(message)s",
    )
    redact_logs(settings.log_secrets())
    try:
        sock = bind(settings.http_addr, settings.http_keys_file is not None)
    except (OSError, ValueError) as exc:
        # exiting anyway: a SIGTERM now (`up` stopping) must not hide why, the exit code
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        log.error("cannot serve HTTP on %s: %s", settings.http_addr, exc)
        raise SystemExit(CANNOT_SERVE) from exc
    tune_gc()

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await serve(settings, stop, sock=sock)

    try:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            runner.run(main())
    except (ConnectionError, ValueError) as exc:  # no NATS, a bad keys file: say which
        log.error("%s", exc)
        raise SystemExit(2) from exc


def main() -> None:
    """`python -m turnstream.http`: serve on TURNSTREAM_HTTP_ADDR until SIGINT/SIGTERM."""
    run(Settings())
