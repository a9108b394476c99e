"""`read_attachment`: a file a message of this session carried, for the model to read when
it could not be shown the file itself (a CSV, a log; docs/contract.md#attachments).

It reads only attachments of the calling session (its log's `InputAccepted` names them) from
the object store, and is read-only: approved by the same rules as `read_file`."""

from __future__ import annotations

from typing import Any

from turnstream.tools.base import ToolContext, ToolError, ToolSpec

MAX_LINES = 5000
MAX_CHARS = 200_000


class ReadAttachment:
    spec = ToolSpec(
        name="read_attachment",
        description=(
            "Read a file attached to a message of this conversation, by its name, as text "
            "(`offset` and `limit` pick lines). Images and PDFs were shown to you already."
        ),
        parameters={
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "The attachment's file name."},
                "offset": {"type": "integer", "minimum": 0, "description": "First line, 0-based."},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LINES},
            },
            "required": ["name"],
            "additionalProperties": False,
        },
        read_only=True,
        idempotent=True,
    )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        if ctx.attachment is None:
            raise ToolError("unavailable", "attachments cannot be read here (no object store)")
        found = await ctx.attachment(str(args["name"]))
        if found is None:
            raise ToolError(
                "not_found", f"no attachment named {args['name']!r} in this conversation"
            )
        media_type, data = found
        if not (media_type.startswith("text/") or media_type == "application/json"):
            raise ToolError(
                "not_text", f"{args['name']!r} is {media_type}, not text: it was shown to you"
            )
        lines = data.decode("utf-8", errors="replace").splitlines(keepends=True)
        offset = int(args.get("offset", 0))
        picked = "".join(lines[offset : offset + int(args.get("limit", MAX_LINES))])
        if len(picked) > MAX_CHARS:
            raise ToolError("too_large", f"{len(picked)} characters; read fewer lines (`limit`)")
        return picked
