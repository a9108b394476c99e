"""The A2A HTTP+JSON (REST) binding, served by the SDK's dispatcher on the same handler
(and so the same task store) as JSON-RPC, under `/a2a/rest`: v1.0 paths
(`/a2a/rest/message:send`, `/a2a/rest/tasks/{id}`, …) and v0.3 ones (`/a2a/rest/v1/…`).

Each route asks for the caller's key first, as every route of the app does: no key or an
unknown one is a `401` problem before the SDK sees the request; the body limit is the
app's (`BodyLimit`); what the SDK answers is the binding's own error JSON."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.server.routes import ServerCallContextBuilder, create_rest_routes
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from turnstream.http.a2a.tasks import ContextSource

REST_PATH = "/a2a/rest"
Endpoint = Callable[[Request], Awaitable[Response]]


def rest_routes(
    handler: RequestHandler, context: ContextSource, builder: ServerCallContextBuilder
) -> list[Route]:
    """The SDK's REST routes under `REST_PATH`, each behind the caller's key. (The SDK's
    `/{tenant}` mount is left out: this server has no tenants, and at the root it would
    answer every two-segment path of the app.)"""
    routes = create_rest_routes(
        handler, context_builder=builder, enable_v0_3_compat=True, path_prefix=REST_PATH
    )
    return [
        Route(r.path, _keyed(r.endpoint, context), methods=r.methods, include_in_schema=False)
        for r in routes
        if isinstance(r, Route)
    ]


def _keyed(endpoint: Endpoint, context: ContextSource) -> Endpoint:
    async def keyed(request: Request) -> Response:
        ctx = context()
        client = request.client.host if request.client else None
        who = ctx.auth.principal(request.headers.get("authorization"), client)
        request.state.principal = who.name  # the access log's
        request.state.a2a_principal = who
        return await endpoint(request)

    return keyed
