"""One log message into the auditor (and the audit file): shared by the service and rebuild."""

from __future__ import annotations

import logging

from turnstream.audit.auditor import Auditor
from turnstream.audit.journal import Journal
from turnstream.core.events import decode

log = logging.getLogger("turnstream.audit")


def fold_message(
    auditor: Auditor, journal: Journal | None, seq: int, subject: str, data: bytes
) -> None:
    """Fold the log message at `seq` in, unless it was before; record it in the journal."""
    if seq <= auditor.last_seq:
        return
    try:
        event = decode(data)
    except ValueError as exc:
        # a message that is no event (or from a newer version) must not stop the audit
        log.error("seq %d on %s is not a valid event: %s", seq, subject, exc)
        auditor.last_seq = seq
        if journal is not None:
            journal.add_raw(seq, subject, data)
        return
    auditor.apply(seq, event)
    if journal is not None:
        journal.add(seq, event, data)
