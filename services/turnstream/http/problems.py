"""RFC 9457 problem details: every error the HTTP face answers, with the log's failure classes.

`Problem` is raised anywhere in a route and rendered by the handlers `install` registers;
FastAPI's own errors (validation, 404, 405, 413) are rendered the same way. No handler
echoes a request header or the raw input: a key can never end up in an error body.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from turnstream.core.events import FailureClass

MEDIA_TYPE = "application/problem+json"
TYPE_PREFIX = "urn:turnstream:problem:"


class Problem(Exception):
    """An error answered as `application/problem+json`."""

    def __init__(
        self,
        status: int,
        slug: str,
        title: str,
        detail: str,
        *,
        failure_class: FailureClass | None = None,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.slug = slug
        self.title = title
        self.detail = detail
        self.failure_class = failure_class
        self.headers = headers
        self.extra = extra

    def body(self, instance: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": TYPE_PREFIX + self.slug,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            "instance": instance,
        }
        if self.failure_class is not None:
            body["failureClass"] = self.failure_class.value
        body.update({k: v for k, v in self.extra.items() if v is not None})
        return body


def problem_response(problem: Problem, instance: str) -> Response:
    return Response(
        orjson.dumps(problem.body(instance)),
        status_code=problem.status,
        media_type=MEDIA_TYPE,
        headers=problem.headers,
    )


class BodyLimit:
    """413 as problem+json for a body over the limit: at once from `Content-Length`, or
    while reading a chunked one (bodies are small: it is read whole, then handed on)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                await problem_response(_too_large(), scope["path"])(scope, receive, send)
                return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break  # the client went away; the app will see it
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                await problem_response(_too_large(), scope["path"])(scope, receive, send)
                return
            if not message.get("more_body", False):
                message = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
                break
        first = [message]

        async def replay() -> Message:
            return first.pop() if first else await receive()

        await self.app(scope, replay, send)


def _too_large() -> Problem:
    return Problem(
        413,
        "oversize",
        "Content too large",
        "the request body is larger than the limit (TURNSTREAM_MAX_INPUT_BYTES)",
        failure_class=FailureClass.INVALID_INPUT,
    )


def invalid_input(detail: str, errors: list[str] | None = None, **extra: Any) -> Problem:
    return Problem(
        422,
        "invalid_input",
        "Invalid input",
        detail,
        failure_class=FailureClass.INVALID_INPUT,
        errors=errors,
        **extra,
    )


_STATUS_SLUGS = {
    400: ("not_json", "Not JSON"),
    401: ("unauthenticated", "Unauthenticated"),
    403: ("forbidden", "Forbidden"),
    404: ("not_found", "Not found"),
    405: ("method_not_allowed", "Method not allowed"),
    409: ("conflict", "Conflict"),
}


def _from_http(exc: HTTPException) -> Problem:
    if exc.status_code == 413:
        return _too_large()
    slug, title = _STATUS_SLUGS.get(exc.status_code, ("http_error", "HTTP error"))
    failure = FailureClass.INVALID_INPUT if exc.status_code == 400 else None
    return Problem(exc.status_code, slug, title, str(exc.detail), failure_class=failure)


def _from_validation(exc: RequestValidationError) -> Problem:
    errors = list(exc.errors())
    if any(e.get("type") == "json_invalid" for e in errors):
        return Problem(
            400,
            "not_json",
            "Not JSON",
            "the request body is not valid JSON; send a JSON object "
            "(Content-Type: application/json)",
            failure_class=FailureClass.INVALID_INPUT,
        )
    if not isinstance(exc.body, dict | list | None) and any(
        tuple(e.get("loc", ())) == ("body",) for e in errors
    ):  # a body read as bytes: it was not sent as JSON
        return invalid_input(
            "the body is not a JSON object: send it as JSON with the header "
            "Content-Type: application/json"
        )
    lines = [
        f"{'.'.join(str(p) for p in e.get('loc', ()))}: "
        + str(e.get("msg")).removeprefix("Value error, ")
        for e in errors
    ]
    return invalid_input(f"the request does not match the schema: {lines[0]}", lines)


def install(app: FastAPI) -> None:
    """Render every error of `app` as problem+json."""

    async def on_problem(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, Problem)
        return problem_response(exc, request.url.path)

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return problem_response(_from_http(exc), request.url.path)

    async def on_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return problem_response(_from_validation(exc), request.url.path)

    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(RequestValidationError, on_validation)
