"""What the gateway's decider asks and only I/O can tell: whether a session asked an
interaction, which agent a session has, whether a message's attachments are in the object
store (its inline ones put there). Each answers one of `decider.Effect`'s questions."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Sequence

from turnstream.bus import Bus
from turnstream.bus.objects import digest_of, object_info
from turnstream.core.commands import INLINE_MAX_BYTES, AttachmentIn
from turnstream.core.events import InteractionRequested, SessionConfigured, decode

ANSWER_RECHECKS_S = (0.25, 0.5, 1.0)
"""Pauses before an answer's interaction is looked for again, before the answer is rejected.
On a cluster a client may have read the prompt from a replica that applied it before the
one this read is answered by (seen under load at R3: an answer to a prompt stored 120 ms
earlier rejected as unknown, its turn then waiting out the prompt's deadline)."""


async def was_requested(bus: Bus, session_id: str, interaction_id: str) -> bool:
    """Whether the session asked the interaction (its log holds the InteractionRequested),
    looked for again after each of `ANSWER_RECHECKS_S` while it is not found; an answer is
    rare, so a few filtered reads of the log are cheap."""
    for pause in (0.0, *ANSWER_RECHECKS_S):
        await asyncio.sleep(pause)
        if await _requested_now(bus, session_id, interaction_id):
            return True
    return False


async def _requested_now(bus: Bus, session_id: str, wanted: str) -> bool:
    found = False

    def on_event(_seq: int, _subject: str, data: bytes) -> None:
        nonlocal found
        event = decode(data)
        found = found or (
            isinstance(event, InteractionRequested) and event.data.interaction_id == wanted
        )

    subjects = bus.subjects
    subject = subjects.log(session_id, "InteractionRequested")
    stream = subjects.log_stream_of(session_id)
    await bus.store.scan(on_event, subject=subject, stream=stream)
    return found


async def session_agent(bus: Bus, session_id: str) -> str | None:
    """The agent the session's log configured (its first `SessionConfigured`), if any."""
    found: list[str] = []

    def on_event(_seq: int, _subject: str, data: bytes) -> None:
        event = decode(data)
        if isinstance(event, SessionConfigured) and not found:
            found.append(event.data.agent)

    subject = bus.subjects.log(session_id, "SessionConfigured")
    stream = bus.subjects.log_stream_of(session_id)
    await bus.store.scan(on_event, subject=subject, stream=stream)
    return found[0] if found else None


async def stored(bus: Bus, attachments: Sequence[AttachmentIn]) -> str | None:
    """Put the inline attachments into the object store and check the named ones are there
    as described; why not, or None when every attachment is stored."""
    for item in attachments:
        name = item.object
        info = await object_info(bus, name, attachment=True)
        if item.data is not None:
            if info is None:
                await (await bus.attachments()).put(name, base64.b64decode(item.data))
            continue
        if info is None:
            return (
                f"attachment {item.name!r}: no object {name} in the object store; put its "
                "bytes there first (or send them inline, up to "
                f"{INLINE_MAX_BYTES} bytes)"
            )
        if info.size != item.size:
            return f"attachment {item.name!r}: {name} has {info.size} bytes, size says {item.size}"
        digest = digest_of(info)
        if digest and digest.hex() != item.sha256:
            return f"attachment {item.name!r}: the bytes of {name} do not match its sha256"
    return None
