"""Event ids: UUIDv7 strings. Core never draws random ids; it takes an id factory.

`derived_uuid7` builds a valid UUIDv7 whose random bits come from a key, so a service
that redoes the same work (a redelivered message) produces the same event ids and
JetStream's `Nats-Msg-Id` dedup turns the retry into a no-op.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from datetime import datetime

IdFactory = Callable[[], str]


def derived_uuid7(unix_ms: int, key: str) -> str:
    """A UUIDv7 with timestamp `unix_ms` and the rest of its bits taken from `key`."""
    digest = hashlib.blake2b(key.encode(), digest_size=10).digest()
    rand_a = int.from_bytes(digest[:2], "big") & 0x0FFF
    rand_b = int.from_bytes(digest[2:], "big") & ((1 << 62) - 1)
    value = (unix_ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= rand_a << 64
    value |= 0b10 << 62
    value |= rand_b
    return str(uuid.UUID(int=value))


def unix_ms(time: datetime) -> int:
    return int(time.timestamp() * 1000)


def derived_id(origin: str, purpose: str, at: datetime | int) -> str:
    """The id of the event that `purpose` makes of `origin` (an invocation, an inbound
    message, a finding), timestamped `at` (the origin's time, or its Unix ms): whoever
    redoes the same work derives the same id."""
    return derived_uuid7(at if isinstance(at, int) else unix_ms(at), f"{origin}:{purpose}")
