"""One partition of the log audited: fold it into summaries and checks, write them, keep its
audit file. An audit instance runs one for each partition it holds (`app.py`).

Taking a partition over: scan its log once with an ordered consumer (the same fold as
`turnstream audit rebuild`), recording in the partition's audit file what it lacks,
writing every summary and the violations the log does not have yet (`report.py`). Then
the partition's durable consumer `audit` (a pull consumer, `intake.py`) brings what is
new, in batches: fold, record, write the journal, append violations, put the summaries
whose turn started or ended, and only then ack; the other changed summaries (counters,
`lastSeq`) are put once a second, and a take-over's scan rewrites them all anyway. A timer
looks for turns open past their bound.

Only the holder writes: before each write the worker asks `owns()` (its lease is valid
here, so no other instance holds the partition); once it does not, the worker stops, its
batch not acked (the new holder reads it again). Violations are also fenced in the log
(`report.py`), so a write that was on its way when the lease ran out doubles none.

Memory follows the sessions at work, not the log: once written, the summaries beyond the
`KEEP_SUMMARIES` sessions changed last are forgotten, with the checks' facts of their
ended turns (`Auditor.forget`); a batch that has events of a session not in memory first
reads its summary back from the bucket, where it was written (`Auditor.remember`). The
scan at take-over still folds the whole partition in memory, then forgets the same way.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from turnstream.audit.auditor import Auditor
from turnstream.audit.checks import CheckConfig
from turnstream.audit.fold import fold_message
from turnstream.audit.intake import Intake
from turnstream.audit.journal import Journal
from turnstream.audit.projections import put_all, read_summary
from turnstream.audit.report import NotOwner, report_once
from turnstream.bus import Bus
from turnstream.bus.durables import AUDIT
from turnstream.bus.full import ALARM, backoff_s, noted
from turnstream.bus.kv import KvWrites
from turnstream.bus.retry import retried, stoppable
from turnstream.bus.scan import stream_seq
from turnstream.core.subjects import is_session_id, session_key
from turnstream.core.summary import SessionSummary
from turnstream.runtime import now, source_name, telemetry
from turnstream.runtime.memory import QuietTrim

log = logging.getLogger("turnstream.audit")
DURABLE = AUDIT.name
BATCH = 500
LINGER_S = 0.05
"""How long a batch gathers: a turn's start and end reach its summary this much later."""
COUNTERS_S = 1.0
"""How often the summaries whose turn neither started nor ended are written: a busy
session would otherwise be written with every batch, several times per turn."""
RETRY_S = 0.5
KEEP_SUMMARIES = 1000
"""Summaries kept in memory past their write (the sessions changed last)."""
FORGET_OVER = 1.25
"""Forgetting starts once this many times `KEEP_SUMMARIES` are in memory (each round goes
over the summaries, so not after every batch)."""
AUDIT_WRITES = "$KV.audit"
"""What the alarm counts the audit's refused writes (summaries, violations) under."""


class PartitionAudit:
    """The audit of log partition `partition` (its stream, durable and audit file), for as
    long as `owns()` and `stop` allow."""

    def __init__(
        self,
        bus: Bus,
        partition: int,
        config: CheckConfig,
        journal_path: Path,
        *,
        source: str | None = None,
        owns: Callable[[], bool] = lambda: True,
        clock: Callable[[], datetime] = now,
        tick_s: float = 5.0,
    ) -> None:
        self.bus = bus
        self.partition = partition
        self.stream = bus.subjects.log_stream_at(partition)
        self.auditor = Auditor.with_config(config)
        self.journal = Journal(journal_path)
        self.source = source or source_name("audit")
        self.owns = owns
        self.clock = clock
        self.tick_s = tick_s
        self.kv: Any = None
        self.writes = KvWrites(bus.store.appender, bus.subjects.sessions_bucket)
        self.quiet = QuietTrim()
        """Gives the free memory a burst of batches left back once they pause."""

    async def serve(self, stop: asyncio.Event) -> None:
        """Take the partition over, then audit what comes until `stop` or the lease is lost."""
        subjects = self.bus.subjects
        bucket = subjects.sessions_bucket
        # NATS slow: asked again until it answers or the partition is not ours any more
        self.kv = await stoppable(retried(f"bucket {bucket}", self._sessions_kv), stop)
        if self.kv is None:
            return
        try:
            if not await self._open_journal(stop):
                return
            last = await self.bus.store.scan(
                partial(fold_message, self.auditor, self.journal), stream=self.stream
            )
            self.auditor.tick(self.clock())
            if not await self._flush(stop):
                return
            log.info(
                "audit caught up to seq %d of %s: %d sessions, journal %s",
                last,
                self.stream,
                len(self.auditor.summaries),
                self.journal.path,
            )
            self._forget()
            # the setup step made the durable (a new one starts at the log's first event:
            # what the scan read comes again once, and is passed over)
            bound = self.bus.bound_config(AUDIT, self.stream, self.partition)
            if await stoppable(bound, stop) is None:
                return
            intake = await Intake(self.bus.nc, self.stream, DURABLE).start()
            log.info("audit partition %d consuming %s", self.partition, self.stream)
            try:
                await self._work(intake, stop)
            finally:
                self.quiet.cancel()
                await intake.stop()
        finally:
            self.journal.close()

    async def _sessions_kv(self) -> Any:
        return await self.bus.key_value(self.bus.subjects.sessions_bucket)

    async def _open_journal(self, stop: asyncio.Event) -> bool:
        """Open the partition's audit file (waiting while another process of this data
        dir still has it open); False if `stop` came first."""
        while not self.journal.try_open():
            if stop.is_set() or not self.owns():
                return False
            log.info("%s is open in another process; waiting", self.journal.path)
            await asyncio.sleep(RETRY_S)
        log_last = await self.bus.store.last_seq_on(stream=self.stream)
        if self.journal.last_seq > log_last:
            # the file records a log that is gone (e.g. a new server store): keep it, and
            # start a new chain for this log
            self.journal.close()
            path = self.journal.path
            kept = path.with_name(f"{path.stem}-{int(time.time())}{path.suffix}")
            path.rename(kept)
            log.warning(
                "%s goes up to seq %d but the log ends at %d: kept it as %s, starting anew",
                path,
                self.journal.last_seq,
                log_last,
                kept,
            )
            self.journal = Journal(path).open()
        return True

    async def _work(self, intake: Intake, stop: asyncio.Event) -> None:
        next_tick = time.monotonic() + self.tick_s
        next_counters = time.monotonic() + COUNTERS_S
        while not stop.is_set() and self.owns():
            wait_s = min(COUNTERS_S / 2, self.tick_s) if self.auditor.dirty else self.tick_s
            wait_s = max(0.05, min(wait_s, next_tick - time.monotonic()))
            batch = await intake.next_batch(wait_s, LINGER_S, BATCH, stop)
            seqs = [stream_seq(msg) for msg in batch]
            if seqs and seqs[0] > self.auditor.last_seq + 1:
                if not await self._fill_gap(stop):
                    return
            last = self.auditor.last_seq
            new = [(seq, msg) for seq, msg in zip(seqs, batch, strict=True) if seq > last]
            if not await self._recall([msg.subject for _, msg in new], stop):
                return  # stopping: the batch comes again
            for seq, msg in new:
                fold_message(self.auditor, self.journal, seq, msg.subject, msg.data)
            if time.monotonic() >= next_tick:
                next_tick = time.monotonic() + self.tick_s
                self.auditor.tick(self.clock())
                self.journal.flush(sync=True)
            counters = time.monotonic() >= next_counters
            if counters:
                next_counters = time.monotonic() + COUNTERS_S
            if not await self._flush(stop, turned_only=not counters):
                return  # stopping (or not the holder) before it was written: it comes again
            self._forget()
            if batch:
                await intake.ack(batch[-1])  # the consumer acks all: one covers the batch
                telemetry.audited(batch)
                self.quiet.touch()

    async def _fill_gap(self, stop: asyncio.Event) -> bool:
        """Deliveries lost on a reconnect count as delivered for the server, and the ack
        of a later message covers them: read what is missing from the log itself.
        False: stopping before it was folded in."""
        after = self.auditor.last_seq
        missed: list[tuple[int, str, bytes]] = []
        last = await self.bus.store.scan(
            lambda seq, subject, data: missed.append((seq, subject, data)),
            after_seq=after,
            stream=self.stream,
        )
        if not await self._recall([subject for _, subject, _ in missed], stop):
            return False
        for seq, subject, data in missed:
            fold_message(self.auditor, self.journal, seq, subject, data)
        log.warning(
            "audit: deliveries after seq %d were lost; read up to %d from the log", after, last
        )
        return True

    async def _recall(self, log_subjects: list[str], stop: asyncio.Event) -> bool:
        """Read back the summaries of the sessions of `log_subjects` that are not in memory
        (forgotten once written; a new session has none); retry until they are read or
        `stop` is set (False)."""
        session_in = self.bus.subjects.session_from_log
        summaries = self.auditor.summaries
        wanted = [s for s in {session_in(x) for x in log_subjects} if s not in summaries]
        wanted = [s for s in wanted if is_session_id(s)]  # none was written, none forgotten
        while wanted:
            try:
                found = await asyncio.gather(*(self._written(s) for s in wanted))
            except Exception as exc:  # a disconnect: nats-py reconnects, we retry
                log.warning("audit: reading summaries back failed (%s); retrying", exc)
                if stop.is_set():
                    return False
                await asyncio.sleep(RETRY_S)
                continue
            for summary in found:
                if summary is not None:
                    self.auditor.remember(summary)
            break
        return True

    async def _written(self, session_id: str) -> SessionSummary | None:
        found = await read_summary(self.kv, session_key(session_id))
        return found[0] if found else None

    def _forget(self) -> None:
        if len(self.auditor.summaries) > KEEP_SUMMARIES * FORGET_OVER:
            self.auditor.forget(KEEP_SUMMARIES)

    async def _flush(self, stop: asyncio.Event, *, turned_only: bool = False) -> bool:
        """Write what the fold left behind; retry until it is written or `stop` is set.
        False: stopping, or the partition is not ours any more (nothing more is written)."""
        self.journal.flush()
        violations = self.auditor.take_violations(self.clock(), self.source)
        summaries = self.auditor.take_dirty(turned_only=turned_only)
        refusals = 0
        while True:
            try:
                if violations:
                    appended = await report_once(self.bus, violations, self.owns)
                    if appended:
                        log.warning("%d violation(s): %s", len(appended), _kinds(appended))
                    violations = []
                if not self.owns():
                    raise NotOwner(self.stream)
                await put_all(self.writes, summaries)
                ALARM.stored(AUDIT_WRITES)
                return True
            except NotOwner:
                log.warning("audit: %s is not ours any more; stopping", self.stream)
                return False
            except Exception as exc:  # a disconnect: nats-py reconnects, we retry
                if stop.is_set():
                    return False
                if noted(exc, AUDIT_WRITES):  # the store is full (logged once): back off
                    refusals += 1
                    await asyncio.sleep(backoff_s(refusals))
                    continue
                log.warning("audit write failed (%s); retrying", exc)
                await asyncio.sleep(RETRY_S)


def _kinds(violations: list[Any]) -> str:
    return ", ".join(f"{v.data.kind} in {v.session_id}" for v in violations[:5])
