"""Objects of the two object stores, read by direct get: the object store's own `get` reads
them through a consumer it finds by subject, which the users reading them need not be
allowed (ops/accounts.conf).

`ts_blobs` holds what the services wrote (large tool results, archived sessions);
`ts_attachments` the files messages carry, `att/<sha256>`, which the doors (gateway, HTTP,
chat channels) write. Apart because NATS cannot narrow a right to write meta records to
some names (a meta subject is the whole name in base64): in one bucket, a door could
rewrite the record of an archive or a tool result."""

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

from turnstream.bus.port import Bus
from turnstream.core.events import ATTACHMENT_PREFIX


async def object_info(bus: Bus, name: str, *, attachment: bool = False) -> Any | None:
    """The object's info (size, digest, chunks), None when there is no such object; in
    `ts_blobs`, or `attachment`s' bucket."""
    try:
        store = await (bus.attachments() if attachment else bus.blobs())
        return await store.get_info(name)
    except NotFoundError:  # nats-py's ObjectNotFoundError is one
        return None


def _bucket(bus: Bus, attachment: bool) -> str:
    """The bucket to read from: ours, never the one a meta record names (anyone who may
    write a record could name another bucket)."""
    return bus.subjects.attachments_bucket if attachment else bus.subjects.blobs_bucket


async def object_bytes(bus: Bus, info: Any, *, attachment: bool = False) -> bytes:
    """The bytes of the object `info` describes, checked against its digest."""
    if not info.nuid:
        return b""
    bucket = _bucket(bus, attachment)
    chunks: list[bytes] = []
    await bus.store.direct.read(
        f"OBJ_{bucket}", f"$O.{bucket}.C.{info.nuid}", lambda _seq, _s, data: chunks.append(data)
    )
    data = b"".join(chunks)
    digest = digest_of(info)
    if digest and hashlib.sha256(data).digest() != digest:
        raise RuntimeError(f"the object {info.name} does not match its digest (read again)")
    return data


async def read_object(bus: Bus, name: str, *, attachment: bool = False) -> bytes | None:
    """The bytes of object `name`, None when there is no such object."""
    info = await object_info(bus, name, attachment=attachment)
    return None if info is None else await object_bytes(bus, info, attachment=attachment)


async def read_attachment(bus: Bus, sha256: str) -> bytes | None:
    """The bytes of attachment `sha256` (`att/<sha256>`), None when it is not stored; checked
    against the hash its name says, not only the digest its writer recorded: every user that
    may add attachments (a chat channel, the HTTP face) could write any attachment's meta
    record (ops/accounts.conf). One stored before attachments had their own bucket is read
    from `ts_blobs`."""
    name = ATTACHMENT_PREFIX + sha256
    data = await read_object(bus, name, attachment=True)
    if data is None:
        data = await read_object(bus, name)
    if data is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise RuntimeError(f"the object {ATTACHMENT_PREFIX}{sha256} holds other bytes")
    return data


async def has_attachment(bus: Bus, name: str) -> bool:
    """Whether there is an attachment `name`, read by its meta record's subject alone (a
    direct get naming the subject: a user that adds attachments may read meta records, not
    chunks: ops/accounts.conf, `channel-*`)."""
    bucket = bus.subjects.attachments_bucket
    meta = f"$O.{bucket}.M.{base64.urlsafe_b64encode(name.encode()).decode()}"
    try:
        msg = await bus.js.get_last_msg(f"OBJ_{bucket}", meta, direct=True)
    except NotFoundError:
        return False
    return not json.loads(msg.data or b"{}").get("deleted", False)


async def put_new_attachment(bus: Bus, name: str, data: bytes) -> bool:
    """Put `data` as attachment `name` unless there is one (checked first: no chunks written
    for bytes the store has); True if it was put (`Upload`, which never reads chunks or
    purges)."""
    if await has_attachment(bus, name):
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
    """An attachment written as its bytes arrive, chunk by chunk, hashed on the way, and
    named once it is whole (`finish`): so a content-addressed name (`att/<sha256>`) can be
    given to bytes nobody held all at once. Writes chunks and the meta record, never purges:
    an upload abandoned (or of bytes the store had already) leaves its chunks unnamed."""

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
        bucket = self.bus.subjects.attachments_bucket
        await self.bus.js.publish(f"$O.{bucket}.C.{self.nuid}", chunk)
        self.chunks += 1

    async def finish(self, name: str) -> bool:
        """Name the bytes written `name`; False when the store has that name already (a
        content-addressed name: the same bytes), which is kept."""
        if self.pending:
            await self._send(bytes(self.pending))
            self.pending.clear()
        if await has_attachment(self.bus, name):
            return False
        bucket = self.bus.subjects.attachments_bucket
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

    async def attach(self, name: str, media_type: str) -> dict[str, Any]:
        """Name the bytes written `att/<sha256>` and describe them as a `message` command's
        attachment (by reference: no bytes)."""
        await self.finish(ATTACHMENT_PREFIX + self.sha256)
        return {"name": name, "mediaType": media_type, "size": self.size, "sha256": self.sha256}


async def attachment_chunks(bus: Bus, info: Any, per_read: int = 8) -> AsyncIterator[bytes]:
    """The object's bytes, a few chunks at a time (a download need not hold it whole);
    its digest was checked when it was named (`Upload.finish`, the gateway's `stored`)."""
    if not info.nuid:
        return
    bucket = bus.subjects.attachments_bucket
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
