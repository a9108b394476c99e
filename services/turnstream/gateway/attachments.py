"""A message's attachments at the gateway, from the command alone (pure: the type, the
size, inline bytes against their hash). What is checked against the object store (a named
object is there with that size and hash; inline bytes are put there) is the shell's
(`lookups.stored`), asked for by the decider before the `InputAccepted` that names them."""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass

from turnstream.core.commands import (
    ATTACHMENT_TYPES,
    INLINE_MAX_BYTES,
    AttachmentIn,
    MessageCommand,
)
from turnstream.core.events import Attachment
from turnstream.gateway.check import Rejection, fields_of


@dataclass(frozen=True, slots=True)
class AttachmentPolicy:
    max_bytes: int = 20 * 1024 * 1024
    """`TURNSTREAM_ATTACHMENT_MAX_BYTES`: the largest attachment taken."""
    types: tuple[str, ...] = ATTACHMENT_TYPES


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
    if item.media_type not in policy.types:
        return (
            f"media type {item.media_type} is not taken (TURNSTREAM_ATTACHMENT_TYPES: "
            f"{', '.join(policy.types)})"
        )
    if item.size > policy.max_bytes:
        return (
            f"{item.size} bytes is over the limit of {policy.max_bytes} "
            "(TURNSTREAM_ATTACHMENT_MAX_BYTES)"
        )
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
