"""Objects of the object store (`ts_blobs`: large tool results, archived sessions,
attachments), read by direct get: the object store's own `get` reads them through a
consumer it finds by subject, which the users reading them need not be allowed
(ops/accounts.conf)."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from nats.js import api
from nats.js.errors import NotFoundError
from nats.nuid import NUID

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
    add attachments (a chat channel, the HTTP face) could write any object's meta record
    (ops/accounts.conf)."""
    data = await read_object(bus, ATTACHMENT_PREFIX + sha256)
    if data is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise RuntimeError(f"the object {ATTACHMENT_PREFIX}{sha256} holds other bytes")
    return data


async def has_object(bus: Bus, name: str) -> bool:
    """Whether there is an object `name`, read by its meta record's subject alone (a direct
    get naming the subject: a user that adds attachments may read meta records, not chunks:
    ops/accounts.conf, `channel-*`)."""
    bucket = bus.subjects.blobs_bucket
    meta = f"$O.{bucket}.M.{base64.urlsafe_b64encode(name.encode()).decode()}"
    try:
        msg = await bus.js.get_last_msg(f"OBJ_{bucket}", meta, direct=True)
    except NotFoundError:
        return False
    return not json.loads(msg.data or b"{}").get("deleted", False)


async def put_new_object(bus: Bus, name: str, data: bytes) -> bool:
    """Put `data` as object `name` unless there is one (checked first: no chunks written for
    bytes the store has); True if it was put (`Upload`, which never reads chunks or purges)."""
    if await has_object(bus, name):
        return False
    upload = Upload(bus)
    await upload.write(data)
    return await upload.finish(name)


def digest_of(info: Any) -> bytes:
    """The SHA-256 the store recorded for the object (`SHA-256=<base64url>`), b"" if none."""
    algorithm, _, value = (info.digest or "").partition("=")
    if algorithm.upper() != "SHA-256" or not value:
        return b""
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))


CHUNK_BYTES = 128 * 1024
"""The object store's own chunk size (nats-py's default)."""
_NUID = NUID()


class Upload:
    """An object written as its bytes arrive, chunk by chunk, hashed on the way, and named
    once it is whole (`finish`): so a content-addressed name (`att/<sha256>`) can be given
    to bytes nobody held all at once. Writes chunks and the meta record, never purges: an
    upload abandoned (or of bytes the store had already) leaves its chunks unnamed."""

    def __init__(self, bus: Bus, chunk_bytes: int = CHUNK_BYTES) -> None:
        self.bus = bus
        self.chunk_bytes = chunk_bytes
        self.nuid = _NUID.next().decode()
        self.hash = hashlib.sha256()
        self.size = 0
        self.chunks = 0
        self.pending = bytearray()

    @property
    def sha256(self) -> str:
        return self.hash.hexdigest()

    async def write(self, data: bytes) -> None:
        self.hash.update(data)
        self.size += len(data)
        self.pending += data
        while len(self.pending) >= self.chunk_bytes:
            await self._send(bytes(self.pending[: self.chunk_bytes]))
            del self.pending[: self.chunk_bytes]

    async def _send(self, chunk: bytes) -> None:
        bucket = self.bus.subjects.blobs_bucket
        await self.bus.js.publish(f"$O.{bucket}.C.{self.nuid}", chunk)
        self.chunks += 1

    async def finish(self, name: str) -> bool:
        """Name the bytes written `name`; False when the store has that name already (a
        content-addressed name: the same bytes), which is kept."""
        if self.pending:
            await self._send(bytes(self.pending))
            self.pending.clear()
        if await has_object(self.bus, name):
            return False
        bucket = self.bus.subjects.blobs_bucket
        info = api.ObjectInfo(
            name=name,
            bucket=bucket,
            nuid=self.nuid,
            size=self.size,
            chunks=self.chunks,
            mtime=datetime.now(UTC).isoformat(),
            digest="SHA-256=" + base64.urlsafe_b64encode(self.hash.digest()).decode(),
            options=api.ObjectMetaOptions(max_chunk_size=self.chunk_bytes),
        )
        meta = base64.urlsafe_b64encode(name.encode()).decode()
        await self.bus.js.publish(
            f"$O.{bucket}.M.{meta}",
            json.dumps(info.as_dict()).encode(),
            headers={"Nats-Rollup": "sub"},
        )
        return True


async def object_chunks(bus: Bus, info: Any, per_read: int = 8) -> AsyncIterator[bytes]:
    """The object's bytes, a few chunks at a time (a download need not hold it whole);
    its digest was checked when it was named (`Upload.finish`, the gateway's `stored`)."""
    if not info.nuid:
        return
    bucket = bus.subjects.blobs_bucket
    stream, subject = f"OBJ_{bucket}", f"$O.{bucket}.C.{info.nuid}"
    last, sent = 0, 0
    got: list[tuple[int, bytes]] = []
    while sent < info.chunks:
        got.clear()
        await bus.store.direct.batch(
            stream,
            subject,
            lambda seq, _s, data: got.append((seq, data)),
            after_seq=last,
            batch=min(per_read, info.chunks - sent),
        )
        if not got:
            raise RuntimeError(f"the object {info.name} has {sent} of {info.chunks} chunks")
        for seq, data in list(got):
            last, sent = seq, sent + 1
            yield data
