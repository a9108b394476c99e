"""`GET /v1/sessions/{id}/attachments/{sha256}`: an attachment's bytes, to a reader of a
session that was sent it. The object store is content-addressed (one object for every
session that sent the same bytes), so the hash alone proves nothing: the session's own
`InputAccepted` events must name it, or it is not found, whatever the caller may read
elsewhere. Streamed a few chunks at a time; never rendered by a browser as a page of this
origin (`nosniff`, a sandboxing CSP; only images are shown inline)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Path
from starlette.responses import Response, StreamingResponse

from turnstream.bus.objects import attachment_chunks, object_info
from turnstream.core.events import Attachment, InputAccepted, decode
from turnstream.http.context import HttpContext, OnSession
from turnstream.http.problems import Problem

router = APIRouter(prefix="/v1/sessions/{id}", tags=["reads"])
INLINE = ("image/png", "image/jpeg", "image/gif", "image/webp")


async def sent_to(ctx: HttpContext, session: str, sha256: str) -> Attachment | None:
    """The attachment `sha256` as the session's log recorded it, None if it was not sent
    there (only its `InputAccepted` events are read, by their own subject)."""
    async for record in ctx.hub.direct.records(session, after=0, kind="InputAccepted"):
        event = decode(record.data)
        if isinstance(event, InputAccepted):
            for item in event.data.attachments or []:
                if item.sha256 == sha256:
                    return item
    return None


@router.get(
    "/attachments/{sha256}",
    summary="An attachment's bytes (a file sent to this session)",
    response_class=Response,
    responses={
        200: {"description": "the bytes, with the media type they were sent with"},
        404: {"description": "no such attachment in this session"},
        410: {"description": "the object store no longer has it (pruned)"},
    },
)
async def get_attachment(
    call: OnSession,
    sha256: Annotated[str, Path(pattern="^[0-9a-f]{64}$", description="lowercase hex")],
) -> Response:
    ctx, who, session = call.ctx, call.who, call.session
    who.require("read", session)
    item = await sent_to(ctx, session, sha256)
    if item is None:
        raise Problem(
            404, "not_found", "Not found", f"session {session} was sent no attachment {sha256}"
        )
    info = await object_info(ctx.bus, item.object, attachment=True)
    if info is None or info.deleted:
        raise Problem(
            410,
            "gone",
            "Gone",
            f"attachment {item.name!r} of session {session} is no longer in the object store",
        )
    disposition = "inline" if item.media_type in INLINE else "attachment"
    headers = {
        "Content-Length": str(info.size),
        "Content-Disposition": f"{disposition}; filename*=UTF-8''{quote(item.name)}",
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "sandbox; default-src 'none'",
        "Cache-Control": "private, max-age=3600, immutable",
    }
    return StreamingResponse(
        attachment_chunks(ctx.bus, info), media_type=item.media_type, headers=headers
    )
