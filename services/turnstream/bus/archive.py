"""Retention by archiving: ended sessions move from `TS_LOG` to the object store.

`TS_LOG` keeps every event forever by default (or `TURNSTREAM_LOG_MAX_AGE_DAYS`, which
drops old events for good). Archiving keeps them and frees the stream: a session whose
last event is older than a cutoff, with no turn or workflow open, is written to the
`ts_blobs` object store as `archive/<session key>.jsonl` (one `{"seq", "event"}` per line,
the event exactly as the log held it), read back and compared, and only then purged from
the stream. `replay` and the other readers of a whole session read the archived part
first, then what the log has (`read_archived`). A session that gets a new message after
being archived goes on in the log; archiving it again adds to its file.

Which sessions to archive is found without reading them: the server counts each
session's events, and a session's last event is one request; only a session that goes is
read whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import orjson
from nats.js.errors import NotFoundError

from turnstream.bus.contract import StoredEvent
from turnstream.bus.objects import read_object
from turnstream.bus.port import Bus
from turnstream.bus.scan import open_sessions, subject_counts
from turnstream.core.events import decode
from turnstream.core.subjects import session_key

ARCHIVE_PREFIX = "archive/"


@dataclass(frozen=True, slots=True)
class Archived:
    session_id: str
    events: int
    last_time: datetime


def archive_name(session_id: str) -> str:
    return f"{ARCHIVE_PREFIX}{session_key(session_id)}.jsonl"


async def sessions_in_log(bus: Bus) -> dict[str, int]:
    """Each session in the log (every partition) and how many events it has there (no
    event read)."""
    subjects = bus.subjects
    sessions: dict[str, int] = {}
    for stream in subjects.log_streams:
        counts = await subject_counts(bus.nc, stream, subjects.log_all)
        for subject, n in counts.items():
            session_id = subjects.session_from_log(subject)
            sessions[session_id] = sessions.get(session_id, 0) + n
    return sessions


async def archive_sessions(
    bus: Bus, older_than: datetime, *, dry_run: bool = False
) -> list[Archived]:
    """Archive every ended session whose last event is older than `older_than`."""
    busy = await open_sessions(bus.nc, bus.subjects)
    in_log = await sessions_in_log(bus)
    done = []
    for session_id in sorted(in_log.keys() - busy):
        last = await _last_time(bus, session_id)
        if last is None or last >= older_than:
            continue
        if dry_run:
            done.append(Archived(session_id, in_log[session_id], last))
            continue
        stored = await bus.store.read_session(session_id)
        if not stored or stored[-1].event.time >= older_than:
            continue  # talked to meanwhile
        await _archive(bus, session_id, stored)
        done.append(Archived(session_id, len(stored), stored[-1].event.time))
    return done


async def _last_time(bus: Bus, session_id: str) -> datetime | None:
    """When the session's last event in the log happened (None: it has none)."""
    subjects = bus.subjects
    try:
        msg = await bus.js.get_last_msg(
            subjects.log_stream_of(session_id), subjects.log_session(session_id)
        )
    except NotFoundError:
        return None
    return decode(msg.data or b"").time


async def _archive(bus: Bus, session_id: str, stored: list[StoredEvent]) -> None:
    earlier = await _read(bus, session_id)  # archived before, then talked to again
    everything = [*earlier, *stored]
    store = await bus.blobs()
    await store.put(archive_name(session_id), _lines(everything))
    back = await _read(bus, session_id)
    if [(s.seq, s.event.id) for s in back] != [(s.seq, s.event.id) for s in everything]:
        raise RuntimeError(f"the archive of {session_id} does not read back; nothing purged")
    subjects = bus.subjects
    await bus.js.purge_stream(
        subjects.log_stream_of(session_id), subject=subjects.log_session(session_id)
    )


async def read_archived(bus: Bus, session_id: str) -> list[StoredEvent]:
    """The session's archived events, in log order ([] when it was never archived)."""
    return await _read(bus, session_id)


async def _read(bus: Bus, session_id: str) -> list[StoredEvent]:
    data = await read_object(bus, archive_name(session_id))
    if data is None:
        return []
    return [
        StoredEvent(int(row["seq"]), decode(orjson.dumps(row["event"])))
        for row in map(orjson.loads, data.splitlines())
    ]


def _lines(stored: list[StoredEvent]) -> bytes:
    return b"".join(
        orjson.dumps({"seq": s.seq, "event": s.event.model_dump(mode="json", by_alias=True)})
        + b"\n"
        for s in stored
    )
