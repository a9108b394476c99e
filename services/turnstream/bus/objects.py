"""Objects of the object store (`ts_blobs`: large tool results, archived sessions,
attachments), read by direct get: the object store's own `get` reads them through a
consumer it finds by subject, which the users reading them need not be allowed
(ops/accounts.conf)."""

from __future__ import annotations

import base64
import hashlib
from datetime import UTC, datetime
from typing import Any

import orjson
from nats.js import api
from nats.js.errors import NotFoundError

from turnstream.bus.connection import Bus
from turnstream.core.events import ATTACHMENT_PREFIX


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


async def read_attachment(bus: Bus, sha256: str) -> bytes | None:
    """The bytes of attachment `sha256` (`att/<sha256>`), None when it is not stored; checked
    against the hash its name says, not only the digest its writer recorded: a user that may
    add attachments (a chat channel) could write any object's meta (ops/accounts.conf)."""
    data = await read_object(bus, ATTACHMENT_PREFIX + sha256)
    if data is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise RuntimeError(f"the object {ATTACHMENT_PREFIX}{sha256} holds other bytes")
    return data


def digest_of(info: Any) -> bytes:
    """The SHA-256 the store recorded for the object (`SHA-256=<base64url>`), b"" if none."""
    algorithm, _, value = (info.digest or "").partition("=")
    if algorithm.upper() != "SHA-256" or not value:
        return b""
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))


CHUNK_BYTES = 128 * 1024
"""The object store's chunk size (nats-py's default)."""


async def has_object(bus: Bus, name: str) -> bool:
    """Whether there is an object `name`, read by its meta subject alone (a direct get
    that names the subject: a writer of attachments may read metas, not chunks)."""
    bucket = bus.subjects.blobs_bucket
    meta = f"$O.{bucket}.M.{_encoded(name)}"
    try:
        msg = await bus.js.get_last_msg(f"OBJ_{bucket}", meta, direct=True)
    except NotFoundError:
        return False
    return not orjson.loads(msg.data or b"{}").get("deleted", False)


async def put_new_object(bus: Bus, name: str, data: bytes) -> bool:
    """Put `data` as object `name` unless there is one; True if it was put. Written as the
    object store writes (its chunks, then its meta), without what its `put` does besides:
    reading the bucket's messages and purging a replaced object's chunks, which a user that
    only adds attachments is not allowed (ops/accounts.conf, `channel-*`)."""
    if await has_object(bus, name):
        return False
    bucket = bus.subjects.blobs_bucket
    nuid = bus.nc._nuid.next().decode()
    chunks, view = 0, memoryview(data)
    for start in range(0, len(data), CHUNK_BYTES):
        await bus.js.publish(f"$O.{bucket}.C.{nuid}", bytes(view[start : start + CHUNK_BYTES]))
        chunks += 1
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()
    info = api.ObjectInfo(
        name=name,
        bucket=bucket,
        nuid=nuid,
        size=len(data),
        chunks=chunks,
        mtime=datetime.now(UTC).isoformat(),
        digest=f"SHA-256={digest}",
        options=api.ObjectMetaOptions(max_chunk_size=CHUNK_BYTES),
    )
    await bus.js.publish(
        f"$O.{bucket}.M.{_encoded(name)}",
        orjson.dumps(info.as_dict()),
        headers={api.Header.ROLLUP: "sub"},
    )
    return True


def _encoded(name: str) -> str:
    return base64.urlsafe_b64encode(name.encode()).decode()
