"""A message's attachments at the gateway: what it checks from the command alone (pure:
the type, the size, inline bytes against their hash) and what it checks against the
object store (`stored`: a named object is there with that size and hash; inline bytes are
put there), so the `InputAccepted` that names them can be appended."""

from __future__ import annotations

import base64
import binascii
import hashlib
from datetime import datetime

from turnstream.bus import Bus
from turnstream.bus.objects import digest_of, object_info
from turnstream.core.commands import (
    COMMAND_ADAPTER,
    INLINE_MAX_BYTES,
    AttachmentIn,
    AttachmentPolicy,
    MessageCommand,
)
from turnstream.core.events import Attachment, EventBase
from turnstream.gateway.check import CommandIds, Inbound, Rejection, fields_of, rejected

DEFAULT_POLICY = AttachmentPolicy()
__all__ = ["DEFAULT_POLICY", "AttachmentPolicy", "recorded", "refused", "stored"]


def refused(command: MessageCommand, policy: AttachmentPolicy) -> Rejection | None:
    """Why the command's attachments are refused from what it says alone; None: so far so
    good (named objects are checked against the store by `stored`)."""
    for n, item in enumerate(command.attachments):
        problem = _problem(item, policy)
        if problem is not None:
            return Rejection(
                "attachment",
                f"attachment {n} ({item.name!r}) is refused: {problem}; nothing of the message "
                "was taken, send it again without it or fixed",
                [f"attachments.{n}: {problem}"],
                fields_of(command),
            )
    return None


def _problem(item: AttachmentIn, policy: AttachmentPolicy) -> str | None:
    refusal = policy.refusal(item.media_type, item.size)
    if refusal is not None:
        return refusal
    if item.data is None:
        return None
    try:
        data = base64.b64decode(item.data, validate=True)
    except (binascii.Error, ValueError):
        return "data is not valid base64"
    if len(data) > INLINE_MAX_BYTES:
        return (
            f"{len(data)} bytes inline is over {INLINE_MAX_BYTES}; put it into the object "
            f"store as att/<sha256> first and send the attachment without data"
        )
    if len(data) != item.size:
        return f"data has {len(data)} bytes, size says {item.size}"
    if hashlib.sha256(data).hexdigest() != item.sha256:
        return "the SHA-256 of data does not match sha256"
    return None


def recorded(command: MessageCommand) -> list[Attachment] | None:
    """The attachments as `InputAccepted` records them: described, never their bytes."""
    if not command.attachments:
        return None
    return [Attachment.model_validate(a.model_dump(exclude={"data"})) for a in command.attachments]


async def stored(bus: Bus, command: MessageCommand) -> str | None:
    """Put the inline attachments into the object store and check the named ones are there
    as described; why not, or None when every attachment is stored."""
    for item in command.attachments:
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


async def with_attachments_stored(
    bus: Bus, raw: Inbound, decided: list[EventBase], *, now: datetime, source: str
) -> list[EventBase]:
    """`decided` once the message's attachments are in the object store, or its rejection
    naming the one that is not (the command stays at its inbound seq: nothing is lost)."""
    command = COMMAND_ADAPTER.validate_json(raw.data)
    assert isinstance(command, MessageCommand)
    problem = await stored(bus, command)
    if problem is None:
        return decided
    why = Rejection(
        "attachment", f"{problem}; nothing of the message was taken", [problem], fields_of(command)
    )
    return rejected(raw, why, CommandIds(raw), now, source)
