"""Session snapshots, so a reload reads a snapshot and only the tail of the log.

A snapshot is written only from a state that was just rebuilt from the log (a reload), so
it is exactly the fold of every event up to its sequence: a state the actor built
incrementally may lack an input still on its way to the consumer, and a snapshot of
that would lose it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from turnstream.core.events import Event
from turnstream.core.session import SessionState, fold, state_from_json, state_to_json
from turnstream.core.subjects import session_key

log = logging.getLogger("turnstream.turn_runner")
EVERY = 200
"""A reload that had to read more events than this writes a snapshot."""
MAX_BYTES = 900_000
"""Larger snapshots are not kept (a KV value must fit in one message)."""
FORMAT = 4
"""The shape of the state a snapshot holds: one of another shape is not read (the log is
replayed instead). 2: a turn's phase (`core/turn/phases.py`), its interrupt and abort as
records, a stage's Act its stage execution's (`StageRun.act`). 3: a round's data is
its phases' (the request an interceptor changed, the response and the calls it asks for).
4: a chat lists the attachments its history holds (`ChatState.attachments`)."""


@dataclass(frozen=True)
class Snapshot:
    state: SessionState
    seq: int
    """The log sequence it is the fold up to."""
    events: int | None
    """How many of the session's events that is (None: a snapshot from before it was
    kept), so a reload asks the log for exactly the rest."""


async def load(kv: Any, session_id: str) -> Snapshot | None:
    """The session's snapshot, if there is a usable one."""
    try:
        entry = await kv.get(session_key(session_id))
    except Exception:  # not found (or the bucket is unreachable): replay from the start
        return None
    if entry is None or not entry.value:
        return None
    try:
        body = orjson.loads(entry.value)
        if body.get("format") != FORMAT:
            return None  # its state has another shape; the log is the truth
        if "security_mode" not in body["state"]:
            return None  # written before the runner judged calls: it lacks their proposals
        state = state_from_json(orjson.dumps(body["state"]))
        events = body.get("events")
        return Snapshot(state, int(body["seq"]), None if events is None else int(events))
    except Exception:  # an older format: ignore it, the log is the truth
        log.warning("ignoring an unreadable snapshot of %s", session_id)
        return None


async def save(kv: Any, state: SessionState, seq: int, events: int | None) -> None:
    head = b'{"format":%d,"seq":%d,' % (FORMAT, seq)
    head += b'"events":%d,' % events if events is not None else b""
    body = head + b'"state":%s}' % state_to_json(state)
    if len(body) > MAX_BYTES:
        return
    try:
        await kv.put(session_key(state.session_id), body)
    except Exception as exc:  # a snapshot is an optimisation: never fail a turn for it
        log.warning("snapshot of %s not written: %s", state.session_id, exc)


async def rebuild(
    kv: Any,
    store: Any,
    session_id: str,
    known: Mapping[int, Event] | None = None,
    at_least: int = 0,
    latest: bool = False,
) -> tuple[SessionState, int, int, int | None]:
    """The session from its latest snapshot and the log after it: the state, the sequence
    it is as of, how many events had to be read (`known`, `at_least`, `latest`: how far to
    read, as `EventStore.read_session` takes them), and how many events the session has
    up to there (None: not known, an older snapshot's).

    With `latest`, the snapshot and how far the log goes on the leader are asked at once
    (one round trip, not two): a snapshot is the fold of a prefix of the log, which never
    changes, so whenever it was written it is a sound start."""
    extent = None
    if latest:
        snapshot, extent = await asyncio.gather(load(kv, session_id), store.extent(session_id))
    else:
        snapshot = await load(kv, session_id)
    found = snapshot or Snapshot(SessionState.of(session_id), 0, 0)
    state = found.state
    stored = await store.read_session(
        session_id,
        after_seq=found.seq,
        known=known,
        at_least=at_least,
        latest=latest,
        events_before=found.events,
        extent=extent,
    )
    state = fold(state, [item.event for item in stored])
    events = None if found.events is None else found.events + len(stored)
    return state, (stored[-1].seq if stored else found.seq), len(stored), events
