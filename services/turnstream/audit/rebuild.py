"""Rebuild every session summary from the whole log (no model or tool is called)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from functools import partial

from turnstream.audit.auditor import Auditor
from turnstream.audit.checks import CheckConfig
from turnstream.audit.fold import fold_message
from turnstream.audit.projections import put_newer
from turnstream.bus import Bus


@dataclass(frozen=True, slots=True)
class Rebuilt:
    events: int
    last_seq: int
    """The highest last sequence of a partition (the log's last, with one)."""
    sessions: int
    written: int
    """Summaries written (the others were already as new in the bucket)."""
    violations_in_log: int
    unreported: int
    """Violations the fold finds that are not in the log (the audit service appends them)."""
    seconds: float

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0


async def rebuild(bus: Bus, config: CheckConfig, now: datetime) -> Rebuilt:
    """Fold the whole log, partition by partition (sequences are per partition: one fold
    each), and write each session's summary unless the bucket has a newer one."""
    start = time.perf_counter()
    kv = await bus.key_value(bus.subjects.sessions_bucket)
    events = last = sessions = written = in_log = unreported = 0
    for stream in bus.subjects.log_streams:
        auditor = Auditor.with_config(config)
        count = [0]
        fold = partial(_fold, auditor, count)
        last = max(last, await bus.store.scan(fold, stream=stream))
        auditor.tick(now)
        written += await put_newer(kv, auditor.take_dirty())
        events += count[0]
        sessions += len(auditor.summaries)
        in_log += auditor.violations
        unreported += len(auditor.found)
    return Rebuilt(
        events=events,
        last_seq=last,
        sessions=sessions,
        written=written,
        violations_in_log=in_log,
        unreported=unreported,
        seconds=time.perf_counter() - start,
    )


def _fold(auditor: Auditor, count: list[int], seq: int, subject: str, data: bytes) -> None:
    count[0] += 1
    fold_message(auditor, None, seq, subject, data)
