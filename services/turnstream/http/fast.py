"""`POST /v1/sessions/{id}/messages` without FastAPI's request machinery, for the requests
it can take as they are; everything else goes on to the FastAPI route.

FastAPI resolves a route's dependencies and parameters anew on every request (~0.2 ms of
CPU for this route here, more than the rest of the face's own work on a `?wait=true`
turn). This shell does the same steps with the same functions (`Authenticator`,
`commands.command`, `submit.submit`, the same problem documents), and hands the request,
body and all, to the FastAPI route whenever anything is unusual: a body that does not
validate, a query parameter it does not know or cannot parse, another content type. The
route stays the documented one (OpenAPI) and the one that words the errors of bad input.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl

from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from turnstream.core.subjects import is_session_id
from turnstream.http.commands import MessageIn, command
from turnstream.http.context import HttpContext
from turnstream.http.problems import Problem, problem_response
from turnstream.http.submit import submit, wait_bounded

PATH = re.compile(r"^/v1/sessions/([A-Za-z0-9_:-]{1,128})/messages$")


class FastMessages:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        match = PATH.match(scope["path"])
        ctx: HttpContext | None = getattr(scope["app"].state, "ctx", None)
        if match is None or ctx is None or not is_session_id(match[1]):
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        query = _query(scope)
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
        session = match[1]
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


def _query(scope: Scope) -> dict[str, Any] | None:
    """`wait` and `timeout` as the route takes them; None for anything else (the route
    then answers, with its own words for what is wrong)."""
    out: dict[str, Any] = {"wait": False, "timeout": None}
    for name, value in parse_qsl(scope["query_string"].decode("latin-1")):
        if name == "wait" and value in ("true", "1", "false", "0"):
            out["wait"] = value in ("true", "1")
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
