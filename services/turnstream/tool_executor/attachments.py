"""A session's attachment by name, for `read_attachment`: named by the session's own log
(its `InputAccepted` events), so a call reads only what its conversation was sent."""

from __future__ import annotations

from typing import Any

from turnstream.bus.objects import read_attachment
from turnstream.core.events import InputAccepted


async def session_attachment(bus: Any, session_id: str, name: str) -> tuple[str, bytes] | None:
    """`(media type, bytes)` of the latest attachment called `name` in `session_id`."""
    for stored in reversed(await bus.store.read_kind_of(session_id, "InputAccepted")):
        event = stored.event
        assert isinstance(event, InputAccepted)
        for attachment in event.data.attachments or []:
            if attachment.name == name:
                found = await read_attachment(bus, attachment.sha256)
                return None if found is None else (attachment.media_type, found)
    return None
