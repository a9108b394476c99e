"""Files and images a chat message carries, as its command's `attachments`: fetched from
the platform (`Platform.download`), checked against the same policy the gateway applies
(`Settings.attachment_policy`), then inline when small or put into the object store as
`att/<sha256>` and named by hash (`client.store_attachment`, as `turnstream send --attach`
does). The gateway checks them again; what it would refuse is refused here first, as a
reply to the sender, never a turn."""

from __future__ import annotations

import logging
from typing import Any

from turnstream.bus import Bus
from turnstream.channels.inbound import not_taken
from turnstream.channels.platform import File, Platform, PlatformError, TooLarge
from turnstream.client import attachment, store_attachment
from turnstream.core.commands import INLINE_MAX_BYTES, AttachmentPolicy

log = logging.getLogger("turnstream.channels")

INLINE_BUDGET = INLINE_MAX_BYTES
"""Bytes of one message's files that go inline, all together: base64 makes them a third
larger and the command must stay within TURNSTREAM_MAX_INPUT_BYTES (256 KiB by default);
the others go into the object store."""


class Refused(Exception):
    """A file that cannot be taken: the reply to its sender says which and why."""


async def attach(
    platform: Platform, bus: Bus, files: tuple[File, ...], policy: AttachmentPolicy
) -> list[dict[str, Any]]:
    """The files as a command's `attachments` (their bytes stored or inline). `Refused`
    for one over the size limit or that the platform will not give (the sender is told);
    a transient `PlatformError` is raised (the platform delivers the message again)."""
    found: list[dict[str, Any]] = []
    inline = 0
    for file in files:
        data = await _fetched(platform, file, policy)
        why = policy.refusal(file.media_type, len(data))
        if why is not None:
            raise Refused(not_taken(file.name, why))
        if inline + len(data) <= INLINE_BUDGET:
            inline += len(data)
            found.append(attachment(file.name, file.media_type, data))
        else:
            found.append(await store_attachment(bus, file.name, file.media_type, data))
        log.info("%s (%s, %d bytes) attached", file.name, file.media_type, len(data))
    return found


async def _fetched(platform: Platform, file: File, policy: AttachmentPolicy) -> bytes:
    try:
        return await platform.download(file, policy.max_bytes)
    except TooLarge as exc:
        raise Refused(
            not_taken(file.name, policy.refusal(file.media_type, exc.size) or "")
        ) from None
    except PlatformError as exc:
        if exc.transient:
            raise
        log.warning("%s not fetched: %s", file.name, exc)
        raise Refused(not_taken(file.name, f"{platform.name} would not give it ({exc})")) from None
