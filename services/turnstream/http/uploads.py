"""`POST /v1/sessions/{id}/messages` as `multipart/form-data`: the message's fields as text
parts and its files as file parts, each file streamed into the object store as it arrives
(`bus.objects.Upload`: chunk by chunk, hashed on the way, named `att/<sha256>` once whole),
then the `message` command sent with references only, as the JSON route sends it.

An ASGI layer before the body limit (a 50 MB upload is not a 64 KiB command): it takes a
multipart POST to that path and nothing else. A file the message cannot carry (one too
many, a type not taken, over `TURNSTREAM_ATTACHMENT_MAX_BYTES`) is refused as soon as it is
seen, naming it and why; the rest of the body is read and dropped, and nothing is sent.
"""

from __future__ import annotations

import mimetypes
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.types import ASGIApp, Receive, Scope, Send

from turnstream.bus.errors import BusError
from turnstream.bus.objects import Upload
from turnstream.core.commands import MAX_ATTACHMENTS
from turnstream.core.events import FailureClass
from turnstream.http.commands import MessageIn, command
from turnstream.http.context import HttpContext
from turnstream.http.fast import query_of
from turnstream.http.problems import Problem, invalid_input, problem_response
from turnstream.http.submit import submit, wait_bounded

PATH = re.compile(r"^/v1/sessions/([A-Za-z0-9_:-]{1,128})/messages$")
FIELDS = ("text", "chatId", "agent", "replyTo", "idempotencyKey")
"""The text parts a multipart message takes (the JSON body's scalar fields)."""
FILE_FIELD = "files"


class Uploads:
    """Takes `multipart/form-data` POSTs to `/v1/sessions/{id}/messages`; passes the rest."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = PATH.match(scope["path"]) if scope["type"] == "http" else None
        ctx: HttpContext | None = getattr(scope["app"].state, "ctx", None) if match else None
        kind, options = parse_options_header(_header(scope, b"content-type") if match else "")
        if (
            match is None
            or ctx is None
            or scope["method"] != "POST"
            or kind != b"multipart/form-data"
        ):
            await self.app(scope, receive, send)
            return
        body = Receiving(receive)
        try:
            response: Any = await _message(ctx, match[1], scope, body, options)
        except Problem as problem:
            await body.drain()
            response = problem_response(problem, scope["path"])
        await response(scope, receive, send)


class Receiving:
    """The request's `receive`, knowing whether the body has more to come."""

    def __init__(self, receive: Receive) -> None:
        self.receive = receive
        self.more = True
        self.read = False

    async def __call__(self) -> Any:
        self.read = True
        message = await self.receive()
        self.more = message["type"] == "http.request" and message.get("more_body", False)
        return message

    async def drain(self) -> None:
        """Read the rest of a refused body and drop it, so the client reads the answer; not
        for a caller refused before its body was read (no key, no right: not worth reading
        its upload, and uvicorn closes the connection after the answer)."""
        while self.read and self.more:
            await self()


async def _message(
    ctx: HttpContext, session: str, scope: Scope, receive: Receiving, options: dict[bytes, bytes]
) -> Any:
    client = scope.get("client")
    key = _header(scope, b"authorization") or None
    who = ctx.auth.principal(key, client[0] if client else None)
    scope.setdefault("state", {})["principal"] = who.name
    who.require("send", session)
    query = query_of(scope)
    if query is None:
        raise invalid_input("a multipart message takes the query parameters wait and timeout only")
    boundary = options.get(b"boundary")
    if not boundary:
        raise invalid_input("multipart/form-data without a boundary")
    body = Body(ctx)
    try:
        await body.read(boundary, receive)
    except (BusError, TimeoutError) as exc:  # the store refused a chunk, or NATS is away
        raise Problem(
            503,
            "storage",
            "Service unavailable",
            f"the object store did not take the files ({type(exc).__name__}: {exc}); nothing "
            "was sent: send the message again",
        ) from exc
    try:
        message = MessageIn.model_validate(body.fields())
    except ValidationError as exc:
        errors = [f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}" for e in exc.errors()]
        raise invalid_input(f"the message's fields are refused: {errors[0]}", errors) from None
    cmd = command("message", session, message, who, _header(scope, b"idempotency-key") or None)
    if body.files:
        cmd["attachments"] = body.files
    wait_s = wait_bounded(ctx, query["timeout"]) if query["wait"] else None
    return await submit(ctx, session, cmd, wait_s=wait_s)


@dataclass
class Part:
    name: str = ""
    filename: str | None = None
    media_type: str = ""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    text: bytearray = field(default_factory=bytearray)
    upload: Upload | None = None


class Body:
    """One multipart body read as it arrives. The parser's callbacks are synchronous; what
    they see is queued and written (awaited) after each piece, so at most a piece and a
    chunk are held, whatever the size of the files."""

    def __init__(self, ctx: HttpContext) -> None:
        self.ctx = ctx
        self.policy = ctx.settings.attachment_policy()
        self.texts: dict[str, bytearray] = {}
        self.text_bytes = 0
        self.files: list[dict[str, Any]] = []
        self.part = Part()
        self.header: list[bytearray] = [bytearray(), bytearray()]
        self.queue: list[tuple[str, Part, bytes]] = []

    def fields(self) -> dict[str, str]:
        try:
            return {k: v.decode() for k, v in self.texts.items()}
        except UnicodeDecodeError:
            raise invalid_input("a text part is not UTF-8") from None

    async def read(self, boundary: bytes, receive: Receiving) -> None:
        parser = MultipartParser(
            boundary,
            {
                "on_part_begin": self._begin,
                "on_header_field": lambda d, s, e: self.header[0].extend(d[s:e]),
                "on_header_value": lambda d, s, e: self.header[1].extend(d[s:e]),
                "on_header_end": self._header_end,
                "on_headers_finished": lambda: self.queue.append(("start", self.part, b"")),
                "on_part_data": lambda d, s, e: self.queue.append(("data", self.part, d[s:e])),
                "on_part_end": lambda: self.queue.append(("end", self.part, b"")),
            },
            max_header_count=16,
            max_header_size=8 * 1024,
        )
        while True:
            message = await receive()
            if message["type"] != "http.request":
                raise Problem(400, "incomplete", "Incomplete body", "the client went away")
            try:
                parser.write(message.get("body", b""))
            except Exception as exc:  # python-multipart's parse errors
                raise Problem(400, "bad_multipart", "Bad multipart body", str(exc)) from None
            await self._flush()
            if not message.get("more_body", False):
                break
        parser.finalize()
        await self._flush()

    def _begin(self) -> None:
        self.part = Part()

    def _header_end(self) -> None:
        self.part.headers.append((bytes(self.header[0]).lower(), bytes(self.header[1])))
        self.header = [bytearray(), bytearray()]

    async def _flush(self) -> None:
        queue, self.queue = self.queue, []
        for what, part, data in queue:
            if what == "start":
                self._start(part)
            elif what == "data":
                await self._data(part, data)
            else:
                await self._end(part)

    def _start(self, part: Part) -> None:
        headers = dict(part.headers)
        _, disposition = parse_options_header(headers.get(b"content-disposition"))
        part.name = disposition.get(b"name", b"").decode("utf-8", "replace")
        filename = disposition.get(b"filename")
        if filename is None:
            if part.name not in FIELDS:
                raise invalid_input(
                    f"unknown part {part.name!r}; a multipart message takes the text parts "
                    f"{', '.join(FIELDS)} and files (any part with a filename)"
                )
            return
        part.filename = filename.decode("utf-8", "replace")
        if not part.filename:
            return  # a form's empty file input: no file
        given = headers.get(b"content-type", b"").decode("latin-1").split(";")[0].strip()
        guessed = mimetypes.guess_type(part.filename)[0]
        part.media_type = (given if given != "application/octet-stream" else "") or guessed or ""
        n = len(self.files)
        if n >= MAX_ATTACHMENTS:
            self._refuse(part, f"a message carries at most {MAX_ATTACHMENTS} files")
        if why := self.policy.refusal(part.media_type or "(none)", None):
            self._refuse(part, why)
        part.upload = Upload(self.ctx.bus)

    async def _data(self, part: Part, data: bytes) -> None:
        if part.upload is not None:
            if why := self.policy.oversize(part.upload.size + len(data), so_far=True):
                self._refuse(part, why, status=413)
            await part.upload.write(data)
        elif part.filename is None:
            self.text_bytes += len(data)
            if self.text_bytes > self.ctx.settings.max_input_bytes:
                raise Problem(
                    413,
                    "oversize",
                    "Content too large",
                    "the message's text parts are over TURNSTREAM_MAX_INPUT_BYTES "
                    f"({self.ctx.settings.max_input_bytes} bytes)",
                    failure_class=FailureClass.INVALID_INPUT,
                )
            part.text.extend(data)

    async def _end(self, part: Part) -> None:
        if part.upload is not None:
            self.files.append(await part.upload.attach(part.filename or "", part.media_type))
        elif part.filename is None:
            self.texts[part.name] = part.text

    def _refuse(self, part: Part, why: str, *, status: int = 422) -> None:
        n = len(self.files)
        raise Problem(
            status,
            "invalid_input" if status == 422 else "oversize",
            "Invalid input" if status == 422 else "Content too large",
            f"file {n} ({part.filename!r}) is refused: {why}; nothing of the message was "
            "taken, send it again without it or fixed",
            failure_class=FailureClass.INVALID_INPUT,
            rejection="attachment",
            errors=[f"attachments.{n}: {why}"],
        )


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return ""
