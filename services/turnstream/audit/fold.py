"""One log message into the auditor (and the audit file): shared by the service and rebuild.

Most of a turn's events are of kinds neither the summaries nor the checks read
(`StagePreFired`, `ProviderRequestStarted`, …): for those only the envelope is read
(`unread_head`: the JSON parsed, the envelope's fields checked, the payload left as it
is), which costs a fraction of validating the whole event. Anything else, and anything
that is not a current-version event with a well-formed envelope, is decoded in full as
before; what that decode refuses is recorded as not a valid event.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, NamedTuple

import orjson

from turnstream.audit.auditor import READ_KINDS, Auditor
from turnstream.audit.journal import Journal
from turnstream.core.events import EVENT_TYPES, SCHEMA_VERSION, EventBase, decode

log = logging.getLogger("turnstream.audit")


class Head(NamedTuple):
    """The envelope of an event the fold only counts (what its audit line records)."""

    id: str
    type: str
    time: datetime
    session_id: str
    turn_id: str | None


def fold_message(
    auditor: Auditor, journal: Journal | None, seq: int, subject: str, data: bytes
) -> None:
    """Fold the log message at `seq` in, unless it was before; record it in the journal."""
    if seq <= auditor.last_seq:
        return
    head = unread_head(subject, data)
    if head is not None:
        auditor.count(seq, head.session_id, head.time)
        if journal is not None:
            journal.add(seq, head, data)
        return
    try:
        event = decode(data)
    except Exception as exc:  # upcast raises TypeError/AttributeError on some non-events
        # a message that is no event (or from a newer version) must not stop the audit
        log.error("seq %d on %s is not a valid event: %s", seq, subject, exc)
        auditor.last_seq = seq
        if journal is not None:
            journal.add_raw(seq, subject, data)
        return
    auditor.apply(seq, event)
    if journal is not None:
        journal.add(seq, event, data)


_UNREAD = frozenset(EVENT_TYPES) - READ_KINDS
_KEYS = frozenset(
    {field.alias or name for name, field in EventBase.model_fields.items()} | {"data"}
)
_TIME_LENGTHS = (20, 27)
"""`2026-11-25T20:17:01Z` and `2026-11-25T20:17:01.500686Z`, as events are written (in UTC):
`datetime.fromisoformat` reads those as the decoder does; any other form is decoded."""
_CAUSATION_TYPES = (str, type(None))
_new_tuple = tuple.__new__
"""Builds a `Head` without the Python-level `__new__` NamedTuple generates (a frame per
event; the fields are complete and in order here)."""


def unread_head(subject: str, data: bytes) -> Head | None:
    """The envelope of a current-version event of a kind the fold does not read, when it
    is well formed (its payload is not validated); None for anything else (to decode)."""
    if subject[subject.rfind(".") + 1 :] in READ_KINDS:
        return None  # the subject ends with the kind: spare the parse (the decode checks it)
    try:
        raw: Any = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if type(raw) is not dict or raw.get("type") not in _UNREAD or not raw.keys() <= _KEYS:
        return None
    # subscripts, not `get`s (this runs for most events): a missing field is a KeyError
    try:
        event_id, session_id, time = raw["id"], raw["sessionId"], raw["time"]
        well_formed = (
            type(event_id) is str
            and type(session_id) is str
            and type(time) is str
            and type(raw["chatId"]) is str
            and type(raw["traceId"]) is str
            and type(raw["correlationId"]) is str
            and type(raw["source"]) is str
            and type(raw["data"]) is dict
            and type(raw["schemaVersion"]) is int
            and raw["schemaVersion"] == SCHEMA_VERSION
        )
    except KeyError:
        return None
    turn_id = raw.get("turnId")
    if not (
        well_formed
        and (turn_id is None or type(turn_id) is str)
        and type(raw.get("causationId", "")) in _CAUSATION_TYPES
        and len(time) in _TIME_LENGTHS
        and time[-1] == "Z"
        and time[4] == "-"
        and time[10] == "T"
        and time[19] in ".Z"
    ):
        return None
    try:
        at = datetime.fromisoformat(time)
    except ValueError:
        return None
    return _new_tuple(Head, (event_id, raw["type"], at, session_id, turn_id))
