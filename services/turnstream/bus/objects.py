"""Objects of the object store (`ts_blobs`: large tool results, archived sessions,
attachments), read by direct get: the object store's own `get` reads them through a
consumer it finds by subject, which the users reading them need not be allowed
(ops/accounts.conf)."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from nats.js.errors import NotFoundError

from turnstream.bus.connection import Bus


async def object_info(bus: Bus, name: str) -> Any | None:
    """The object's info (size, digest, chunks), None when there is no such object."""
    try:
        return await (await bus.blobs()).get_info(name)
    except NotFoundError:  # nats-py's ObjectNotFoundError is one
        return None


async def object_bytes(bus: Bus, info: Any) -> bytes:
    """The bytes of the object `info` describes, checked against its digest."""
    if not info.nuid:
        return b""
    bucket = bus.subjects.blobs_bucket
    chunks: list[bytes] = []
    await bus.store.direct.read(
        f"OBJ_{bucket}", f"$O.{bucket}.C.{info.nuid}", lambda _seq, _s, data: chunks.append(data)
    )
    data = b"".join(chunks)
    digest = digest_of(info)
    if digest and hashlib.sha256(data).digest() != digest:
        raise RuntimeError(f"the object {info.name} does not match its digest (read again)")
    return data


async def read_object(bus: Bus, name: str) -> bytes | None:
    """The bytes of object `name`, None when there is no such object."""
    info = await object_info(bus, name)
    return None if info is None else await object_bytes(bus, info)


def digest_of(info: Any) -> bytes:
    """The SHA-256 the store recorded for the object (`SHA-256=<base64url>`), b"" if none."""
    algorithm, _, value = (info.digest or "").partition("=")
    if algorithm.upper() != "SHA-256" or not value:
        return b""
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
