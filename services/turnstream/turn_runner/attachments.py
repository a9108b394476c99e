"""Attachments' bytes for model calls: read from the object store (`att/<sha256>`) and kept
a while, so a turn's later calls (and the next turn's) do not read them again. Bounded in
bytes: the oldest read goes first."""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

from turnstream.bus.objects import read_attachment

log = logging.getLogger(__name__)

CACHE_BYTES = 64 * 1024 * 1024


class AttachmentCache:
    def __init__(self, bus: Any, max_bytes: int = CACHE_BYTES) -> None:
        self.bus = bus
        self.max_bytes = max_bytes
        self.kept: OrderedDict[str, bytes] = OrderedDict()
        self.size = 0

    async def get(self, sha256: str) -> bytes | None:
        """The bytes of attachment `sha256`, or None when the store does not have them."""
        data = self.kept.get(sha256)
        if data is not None:
            self.kept.move_to_end(sha256)
            return data
        try:
            found = await read_attachment(self.bus, sha256)
        except Exception as exc:  # NATS slow or refusing: the turn goes on with a note
            log.warning("attachment %s not read (%r): the model gets a note", sha256, exc)
            return None
        if found is None:
            log.warning("attachment %s is not in the object store: the model gets a note", sha256)
            return None
        data = found
        if len(data) <= self.max_bytes:
            self.kept[sha256] = data
            self.size += len(data)
            while self.size > self.max_bytes:
                _, dropped = self.kept.popitem(last=False)
                self.size -= len(dropped)
        return data
