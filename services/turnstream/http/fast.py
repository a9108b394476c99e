"""The two hot routes without FastAPI's request machinery, for the requests they can take
as they are; everything else goes on to the FastAPI routes.

- `POST /v1/sessions/{id}/messages` (a `?wait=true` turn, a chat message)
- `GET /v1/sessions/{id}/stream` (a browser opening its stream: hundreds at once)

FastAPI resolves a route's dependencies and parameters anew on every request, a cost that
was a large part of the face's own work on a `?wait=true` turn (measured while profiling;
no benchmark in the repo isolates it: `bench/http_face.py` measures the whole path). This shell
does the same steps with the same functions (`Authenticator`, `commands.command`,
`submit.submit`, `sse.open_stream`, the same problem documents), and
hands the request, body and all, to the FastAPI route whenever anything is unusual: a body
that does not validate, a query parameter it does not know or cannot parse, another
content type. The routes stay the documented ones (OpenAPI) and the ones that word the
errors of bad input.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl

from pydantic import ValidationError
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from turnstream.core.subjects import is_session_id
from turnstream.http.commands import MessageIn, command
from turnstream.http.context import HttpContext
from turnstream.http.problems import Problem, problem_response
from turnstream.http.sse import open_stream, resume_seq
from turnstream.http.submit import submit, wait_bounded

PATH = re.compile(r"^/v1/sessions/([A-Za-z0-9_:-]{1,128})/(messages|stream)$")


class FastPaths:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = PATH.match(scope["path"]) if scope["type"] == "http" else None
        ctx: HttpContext | None = getattr(scope["app"].state, "ctx", None) if match else None
        if match is None or ctx is None or not is_session_id(match[1]):
            await self.app(scope, receive, send)
        elif match[2] == "messages" and scope["method"] == "POST":
            await self.message(ctx, match[1], scope, receive, send)
        elif match[2] == "stream" and scope["method"] == "GET":
            await self.stream(ctx, match[1], scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def stream(
        self, ctx: HttpContext, session: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        query = _stream_query(scope)
        if query is None:
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        try:
            client = scope.get("client")
            who = ctx.auth.principal(
                headers.get("authorization"), client[0] if client else None, query["ticket"]
            )
            scope.setdefault("state", {})["principal"] = who.name
            who.require("read", session)
            after = resume_seq(query["after"], headers.get("last-event-id"))
            request = Request(scope, receive)
            response: Any = await open_stream(ctx, request, session, after, query["tokens"])
        except Problem as problem:
            response = problem_response(problem, scope["path"])
        await response(scope, receive, send)

    async def message(
        self, ctx: HttpContext, session: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        headers = _headers(scope)
        query = query_of(scope)
        message = await receive()  # BodyLimit (outside) has read the whole body
        body = message.get("body", b"") if message["type"] == "http.request" else None
        parsed = None
        if (
            body is not None
            and query is not None
            and headers.get("content-type", "").startswith("application/json")
        ):
            try:
                parsed = MessageIn.model_validate_json(body)
            except ValidationError:
                parsed = None
        if parsed is None or query is None:
            sent = [message]

            async def replay() -> Message:
                return sent.pop() if sent else await receive()

            await self.app(scope, replay, send)
            return
        try:
            client = scope.get("client")
            who = ctx.auth.principal(headers.get("authorization"), client[0] if client else None)
            scope.setdefault("state", {})["principal"] = who.name  # the access log's
            who.require("send", session)
            cmd = command("message", session, parsed, who, headers.get("idempotency-key"))
            wait_s = wait_bounded(ctx, query["timeout"]) if query["wait"] else None
            response = await submit(ctx, session, cmd, wait_s=wait_s)
        except Problem as problem:
            response = problem_response(problem, scope["path"])
        await response(scope, receive, send)


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}


BOOLS = {"true": True, "1": True, "false": False, "0": False}


def _stream_query(scope: Scope) -> dict[str, Any] | None:
    """`after`, `ticket`, `tokens` as the stream route takes them; None otherwise."""
    out: dict[str, Any] = {"after": 0, "ticket": None, "tokens": True}
    for name, value in parse_qsl(scope["query_string"].decode("latin-1")):
        if name == "after" and value.isdigit():
            out["after"] = int(value)
        elif name == "ticket" and value:
            out["ticket"] = value
        elif name == "tokens" and value in BOOLS:
            out["tokens"] = BOOLS[value]
        else:
            return None
    return out


def query_of(scope: Scope) -> dict[str, Any] | None:
    """`wait` and `timeout` as the route takes them; None for anything else (the route
    then answers, with its own words for what is wrong)."""
    out: dict[str, Any] = {"wait": False, "timeout": None}
    for name, value in parse_qsl(scope["query_string"].decode("latin-1")):
        if name == "wait" and value in BOOLS:
            out["wait"] = BOOLS[value]
        elif name == "timeout":
            try:
                timeout = float(value)
            except ValueError:
                return None
            if not timeout > 0:
                return None
            out["timeout"] = timeout
        else:
            return None
    return out
