"""Violations into the log, each once, whichever audit instance finds it.

Across a handover two instances can find the same violation: the one taking a partition
over folds the log while the one that held it may still be writing (paused past its
lease, say). A violation's id is derived from what it is about (`checks.Finding`), so the
log's `Nats-Msg-Id` dedup refuses a second copy within the stream's duplicate window; past
it, and without relying on it, each append is fenced on the session's violations:

    read the session's `AuditViolation` events (ids, last sequence L)
    drop the violations already there
    append each of the rest with `Nats-Expected-Last-Subject-Sequence: L` on
      `<prefix>.log.<session>.AuditViolation`: refused if any violation of the session
      was appended since the read, then read again

so a violation found by two instances is in the log once, and none is lost: the instance
that loses the race finds it in the log. Violations are rare; the read costs one batched
direct get per session that has one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import orjson

from turnstream.bus import Bus
from turnstream.bus.appender import AppendError
from turnstream.bus.store import APPEND_TIMEOUT_S, WRONG_LAST_SEQUENCE
from turnstream.bus.tracing import msg_headers
from turnstream.core.events import AuditViolation, encode

log = logging.getLogger("turnstream.audit")
KIND = "AuditViolation"
ATTEMPTS = 10
"""Reads and fenced appends per session before giving up (each lost race means another
instance appended meanwhile; the caller retries the whole write later)."""


class NotOwner(Exception):
    """This instance does not hold the partition any more: it reports nothing."""


async def in_log(bus: Bus, session_id: str) -> tuple[set[str], int]:
    """The ids of the session's violations in the log, and the last one's sequence (0)."""
    subjects = bus.subjects
    ids: set[str] = set()
    last = 0

    def seen(seq: int, _subject: str, data: bytes) -> None:
        nonlocal last
        ids.add(str(orjson.loads(data)["id"]))
        last = seq

    stream = subjects.log_stream_of(session_id)
    await bus.store.direct.read(stream, subjects.log(session_id, KIND), seen)
    return ids, last


async def report_once(
    bus: Bus, violations: Sequence[AuditViolation], owns: Callable[[], bool]
) -> list[AuditViolation]:
    """Append those of `violations` the log does not have, fenced per session; the ones
    appended. `NotOwner` once `owns()` is False (what is left is the new owner's)."""
    by_session: dict[str, list[AuditViolation]] = {}
    for violation in violations:
        by_session.setdefault(violation.session_id, []).append(violation)
    appended: list[AuditViolation] = []
    for session_id, found in by_session.items():
        appended += await _report_session(bus, session_id, found, owns)
    return appended


async def _report_session(
    bus: Bus, session_id: str, found: list[AuditViolation], owns: Callable[[], bool]
) -> list[AuditViolation]:
    subject = bus.subjects.log(session_id, KIND)
    appended: list[AuditViolation] = []
    for _ in range(ATTEMPTS):
        if not owns():
            raise NotOwner(session_id)
        ids, last = await in_log(bus, session_id)
        new = [v for v in found if v.id not in ids]
        if len(new) < len(found):
            log.info("%d violation(s) of %s already in the log", len(found) - len(new), session_id)
        try:
            for violation in new:
                headers = {
                    **msg_headers(violation),
                    "Nats-Expected-Last-Subject-Sequence": str(last),
                    "Nats-Expected-Last-Subject-Sequence-Subject": subject,
                }
                [last] = await bus.store.appender.publish(
                    [(subject, encode(violation), headers)], APPEND_TIMEOUT_S
                )
                appended.append(violation)
            return appended
        except AppendError as exc:
            if exc.err_code not in WRONG_LAST_SEQUENCE:
                raise
            found = [v for v in new if v not in appended]
            log.info("violations of %s appended meanwhile elsewhere: reading again", session_id)
    raise RuntimeError(f"violations of {session_id}: the fence kept refusing")
