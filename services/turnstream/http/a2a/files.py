"""An A2A message's file and data parts as the `message` command's attachments: a file's
bytes (`raw`), a file at a URI (`url`: fetched from `TURNSTREAM_A2A_FILE_HOSTS` only,
through the transport that refuses private peers at connect, size-bounded as it streams),
a data part (its JSON, `application/json`). Each is put into the object store as
`att/<sha256>` (`bus.objects.Upload`) and sent as a reference; the task's stored copy of
the message keeps none of the bytes."""

from __future__ import annotations

import mimetypes
import urllib.parse
from typing import Any

import httpx
import orjson
from a2a.types.a2a_pb2 import Message, Part
from a2a.utils.errors import ContentTypeNotSupportedError, InvalidParamsError
from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]

from turnstream.bus.objects import Upload
from turnstream.core.commands import MAX_ATTACHMENTS
from turnstream.http.context import HttpContext
from turnstream.http.egress import outside_client
from turnstream.settings import Settings

FILE_PARTS = ("raw", "url", "data")


def media_type_of(part: Part, settings: Settings, name: str, given: str = "") -> str:
    """The part's media type (else the server's, else guessed from its name), if the
    deployment takes it; `ContentTypeNotSupportedError` otherwise."""
    kind = (part.media_type or given or mimetypes.guess_type(name)[0] or "").split(";")[0]
    kind = kind.strip()
    if why := settings.attachment_policy().refusal(kind or "(none)", None):
        raise ContentTypeNotSupportedError(message=f"file {name!r}: {why}")
    return kind


async def attachments_of(message: Message, ctx: HttpContext) -> list[dict[str, Any]]:
    """The attachments of `message`'s file and data parts, each stored."""
    parts = [p for p in message.parts if p.WhichOneof("content") in FILE_PARTS]
    if len(parts) > MAX_ATTACHMENTS:
        raise InvalidParamsError(
            message=f"{len(parts)} file and data parts: a message carries at most {MAX_ATTACHMENTS}"
        )
    out = []
    for n, part in enumerate(parts):
        kind = part.WhichOneof("content")
        if kind == "url":
            out.append(await _fetched(part, n, ctx))
            continue
        if kind == "raw":
            name = part.filename or f"file-{n}"
            data = part.raw
            media_type = media_type_of(part, ctx.settings, name)
        else:
            name = part.filename or f"data-{n}.json"
            data = orjson.dumps(MessageToDict(part.data))
            media_type = "application/json"
        _bounded(name, len(data), ctx.settings)
        upload = Upload(ctx.bus)
        await upload.write(data)
        out.append(await upload.attach(name, media_type))
    return out


def _bounded(name: str, size: int, settings: Settings, *, so_far: bool = False) -> None:
    if why := settings.attachment_policy().oversize(size, so_far=so_far):
        raise InvalidParamsError(message=f"file {name!r}: {why}")


async def _fetched(part: Part, n: int, ctx: HttpContext) -> dict[str, Any]:
    """The file at `part.url`, streamed into the store; `InvalidParamsError` naming why not."""
    settings = ctx.settings
    url = part.url
    split = urllib.parse.urlsplit(url)
    name = part.filename or split.path.rpartition("/")[2] or f"file-{n}"
    host = (split.hostname or "").lower()
    if split.scheme not in ("http", "https") or host not in settings.a2a_file_hosts:
        raise InvalidParamsError(
            message=f"file {name!r}: {split.scheme}://{host} is not a host files are fetched "
            f"from (TURNSTREAM_A2A_FILE_HOSTS: {', '.join(settings.a2a_file_hosts) or 'none'})"
        )
    client = outside_client(
        allow_private=settings.a2a_file_allow_private, timeout=settings.a2a_file_timeout_s
    )
    try:
        async with (
            client as http,
            http.stream("GET", url) as response,
        ):
            if response.status_code != 200:
                raise InvalidParamsError(
                    message=f"file {name!r}: {host} answered HTTP {response.status_code}"
                )
            given = response.headers.get("content-type", "")
            media_type = media_type_of(part, settings, name, given)
            _bounded(name, int(response.headers.get("content-length") or 0), settings)
            upload = Upload(ctx.bus)
            async for chunk in response.aiter_bytes():
                _bounded(name, upload.size + len(chunk), settings, so_far=True)
                await upload.write(chunk)
    except httpx.HTTPError as exc:
        raise InvalidParamsError(message=f"file {name!r}: not fetched from {host}: {exc}") from None
    return await upload.attach(name, media_type)


def without_bytes(sent: dict[str, Any]) -> dict[str, Any]:
    """A message as the task keeps it: a file part's bytes left out (they are in the
    object store, named by the turn's `InputAccepted`)."""
    for part in sent.get("parts", []):
        part.pop("raw", None)
    return sent
