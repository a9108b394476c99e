"""The A2A edge (DESIGN §12): outside agents reach turnstream's agents over the Agent2Agent
protocol, through the official `a2a-sdk` (protocol v1.0, and v0.3 clients on the same URL).

- `GET /.well-known/agent-card.json`: the agent card; agent profiles are its skills.
- `POST /a2a`: JSON-RPC (`SendMessage`, `SendStreamingMessage`, `GetTask`, `CancelTask`,
  `SubscribeToTask`, `ListTasks`), parsed and answered by the SDK's dispatcher, handled by
  `Handler`.
- `/a2a/rest/…`: the HTTP+JSON binding of the same methods (`rest`), the same handler.
- push notifications: configs per task in KV (`push`), each task update POSTed to them
  from the log (`pusher`, run by `delivering` for the app's life).

`mount(app)` adds both routes; the same API keys apply as everywhere (a missing or unknown
key is a `401` before any JSON-RPC; scopes and session globs are checked per method).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import orjson
from a2a.server.context import ServerCallContext
from a2a.server.routes import DefaultServerCallContextBuilder, create_jsonrpc_routes
from a2a.server.routes.agent_card_routes import _etag_for, _if_none_match_hits
from a2a.utils.constants import VERSION_HEADER
from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response

from turnstream.bus import Bus
from turnstream.http.a2a.access import PRINCIPAL
from turnstream.http.a2a.card import CACHE_CONTROL, agent_card, card_body, card_version
from turnstream.http.a2a.handler import Handler
from turnstream.http.a2a.push import PushStore
from turnstream.http.a2a.pusher import Pusher
from turnstream.http.a2a.rest import rest_routes
from turnstream.http.context import Caller, Ctx, HttpContext
from turnstream.settings import Settings

log = logging.getLogger("turnstream.http.push")
BIND_WITHIN_S = 10.0
"""How long the HTTP face waits at start for the push delivery's consumer before serving."""

__all__ = ["Handler", "agent_card", "delivering", "mount"]
CARD_PATH = "/.well-known/agent-card.json"
RPC_PATH = "/a2a"


class _Context(DefaultServerCallContextBuilder):
    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state[PRINCIPAL] = request.state.a2a_principal
        return context


def mount(app: FastAPI) -> None:
    """Serve the agent card and both bindings (JSON-RPC, HTTP+JSON) on `app`."""

    def context() -> HttpContext:
        ctx: HttpContext = app.state.ctx
        return ctx

    handler = Handler(context)
    [route] = create_jsonrpc_routes(
        handler, RPC_PATH, context_builder=_Context(), enable_v0_3_compat=True
    )
    dispatch: Any = route.endpoint

    async def a2a_rpc(request: Request, who: Caller) -> Response:
        """A2A JSON-RPC 2.0 (v1.0 methods; v0.3 `message/send`… too)."""
        request.state.a2a_principal = who
        response: Response = await dispatch(request)
        return naming_the_version_header(response, request.headers.get(VERSION_HEADER))

    async def a2a_card(request: Request, ctx: Ctx) -> Response:
        """The agent card: how to reach this server over A2A, and its agents as skills."""
        base = str(request.base_url).rstrip("/")
        card = agent_card(ctx.settings, base, secured=not ctx.auth.open)
        body = card_body(card, card_version(request.headers.get(VERSION_HEADER)))
        headers = {"ETag": _etag_for(body), "Cache-Control": CACHE_CONTROL, "Vary": VERSION_HEADER}
        if _if_none_match_hits(request.headers.get("if-none-match", ""), headers["ETag"]):
            return Response(status_code=304, headers=headers)
        return JSONResponse(body, headers=headers)

    app.add_api_route(RPC_PATH, a2a_rpc, methods=["POST"], tags=["a2a"])
    # the same, not a 307 to it: a client that does not follow a POST's redirect reads
    # an empty body
    app.add_api_route(RPC_PATH + "/", a2a_rpc, methods=["POST"], include_in_schema=False)
    app.add_api_route(CARD_PATH, a2a_card, methods=["GET"], tags=["a2a"])
    app.router.routes.extend(rest_routes(handler, context, _Context()))


VERSION_NOT_SUPPORTED = -32009


def naming_the_version_header(response: Response, sent: str | None) -> Response:
    """A `-32009` (version not supported) that says which header chooses the version: the
    SDK's message names the versions only, and a client that sent no header at all is
    told "version '0.3'" with no word of why."""
    if not isinstance(response, JSONResponse) or b"-32009" not in response.body:
        return response
    body = orjson.loads(response.body)
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict) or error.get("code") != VERSION_NOT_SUPPORTED:
        return response
    got = f"{VERSION_HEADER}: {sent}" if sent else f"no {VERSION_HEADER} header (read as 0.3)"
    error["message"] = (
        f"{error.get('message', 'version not supported')} The request had {got}: send the "
        f"header `{VERSION_HEADER}: 1.0` for the v1.0 methods (SendMessage, GetTask, …), or "
        "none for the v0.3 ones (message/send, tasks/get, …)."
    )
    headers = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}
    return JSONResponse(body, status_code=response.status_code, headers=headers)


@contextlib.asynccontextmanager
async def delivering(bus: Bus, settings: Settings, source: str) -> AsyncIterator[None]:
    """Push notifications are delivered (from the log) while inside; on exit the event in
    hand is finished or left for another replica."""
    stop = asyncio.Event()
    pusher = Pusher(bus, settings, PushStore(bus), source)
    task = asyncio.create_task(pusher.run(stop))
    try:
        # served only once bound: the first start creates the consumer at the log's next
        # event, and a config set before that would miss its task's updates
        try:
            async with asyncio.timeout(BIND_WITHIN_S):
                await pusher.bound.wait()
        except TimeoutError:
            log.warning("push delivery not bound within %.0f s; serving anyway", BIND_WITHIN_S)
        yield
    finally:
        stop.set()
        await task
