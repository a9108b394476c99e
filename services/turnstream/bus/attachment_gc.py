"""Attachments follow the log's retention: an `att/<sha256>` object no event names any more
is deleted (`turnstream attachments prune`).

An attachment is named by the `InputAccepted` that took it, in the log or in a session's
archive (`turnstream archive` moves the events, not the attachments: an archived session
still names them, so they stay as long as its archive). When the log drops events
(`TURNSTREAM_LOG_MAX_AGE_DAYS`), or a message's files were stored but the message refused,
the objects are named by nothing: those older than a grace period are deleted (younger
ones may belong to a message on its way: stored first, accepted after). Content-addressed,
one object serves every session that sent the same bytes: it goes when the last name does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson
from nats.js.errors import NotFoundError

from turnstream.bus.archive import ARCHIVE_PREFIX
from turnstream.bus.contract import LOG_START
from turnstream.bus.objects import read_object
from turnstream.bus.port import Bus
from turnstream.bus.scan import subject_counts
from turnstream.core.events import ATTACHMENT_PREFIX, Event, InputAccepted, decode


@dataclass(frozen=True, slots=True)
class Unnamed:
    name: str
    """`att/<sha256>`, or the chunk subject of chunks no object has (`$O.<bucket>.C.<nuid>`)."""
    size: int
    """Bytes (an object), or chunks (unnamed chunks)."""
    mtime: str


def names_in(events: list[Event]) -> set[str]:
    """The attachment objects the events name."""
    return {
        a.object for e in events if isinstance(e, InputAccepted) for a in e.data.attachments or []
    }


async def named(bus: Bus) -> set[str]:
    """Every attachment object an `InputAccepted` in the log or an archive names."""
    found = names_in([s.event for s in await bus.store.read_kind("InputAccepted", since=LOG_START)])
    try:
        blobs = await (await bus.blobs()).list(ignore_deletes=True)
    except NotFoundError:  # nats-py's answer for a store without objects
        blobs = []
    for name in (info.name for info in blobs):
        if name.startswith(ARCHIVE_PREFIX):
            data = await read_object(bus, name) or b""
            events = [decode(_event_of(line)) for line in data.splitlines() if line]
            found |= names_in(events)
    return found


def _event_of(line: bytes) -> bytes:
    return orjson.dumps(orjson.loads(line)["event"])


def stored_at(mtime: str) -> datetime:
    """An object's `mtime` (RFC 3339, any number of fractional digits); unknown: now (so
    an object of unknown age is never taken for an old one)."""
    text = re.sub(r"(\.\d{6})\d+", r"\1", mtime.replace("Z", "+00:00"))
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return datetime.now(UTC)
    return when if when.tzinfo else when.replace(tzinfo=UTC)


async def prune_attachments(
    bus: Bus, older_than: datetime, *, dry_run: bool = False
) -> list[Unnamed]:
    """Delete the attachment objects no event names, stored before `older_than`."""
    store = await bus.attachments()
    try:
        infos = await store.list(ignore_deletes=True)
    except NotFoundError:  # nats-py's answer for a store without objects
        infos = []
    keep = await named(bus)
    gone = await _unnamed_chunks(bus, {i.nuid for i in infos}, older_than, dry_run=dry_run)
    for info in infos:
        if not info.name.startswith(ATTACHMENT_PREFIX) or info.name in keep:
            continue
        if stored_at(info.mtime or "") >= older_than:
            continue
        if not dry_run:
            await store.delete(info.name)
        gone.append(Unnamed(info.name, info.size or 0, info.mtime or ""))
    return gone


async def _unnamed_chunks(
    bus: Bus, described: set[str], older_than: datetime, *, dry_run: bool
) -> list[Unnamed]:
    """Chunks no meta record describes (an upload abandoned mid-file or refused past its
    bound, the same bytes uploaded again), whose last chunk came before `older_than` (an
    upload in progress writes its meta last). Found by the server's count of subjects."""
    bucket = bus.subjects.attachments_bucket
    stream = f"OBJ_{bucket}"
    prefix = f"$O.{bucket}.C."
    gone = []
    for subject, count in (await subject_counts(bus.nc, stream, prefix + "*")).items():
        if subject.removeprefix(prefix) in described:
            continue
        last = (await bus.js.get_last_msg(stream, subject)).time  # a str or a datetime
        when = last if isinstance(last, datetime) else stored_at(str(last or ""))
        if when >= older_than:
            continue
        if not dry_run:
            await bus.js.purge_stream(stream, subject=subject)
        gone.append(Unnamed(subject, count, when.isoformat()))
    return gone
