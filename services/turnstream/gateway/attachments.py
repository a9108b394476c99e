"""A message's attachments at the gateway, from the command alone (pure: the type, the
size, inline bytes against their hash). What is checked against the object store (a named
object is there with that size and hash; inline bytes are put there) is the shell's
(`lookups.stored`), asked for by the decider before the `InputAccepted` that names them."""

from __future__ import annotations

import base64
import binascii
import hashlib

from turnstream.core.commands import (
    INLINE_MAX_BYTES,
    AttachmentIn,
    AttachmentPolicy,
    MessageCommand,
)
from turnstream.core.events import Attachment
from turnstream.gateway.check import Rejection, fields_of

DEFAULT_POLICY = AttachmentPolicy()


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
