"""The audit fold: every event of the log into session summaries and the invariant checks.

Pure (no I/O, the clock is an argument). The service and `turnstream audit rebuild` drive
the same fold; the service then writes what it leaves behind: the summaries that changed
(`take_dirty`) and the violations not yet in the log (`take_violations`).

The service keeps the summaries of the sessions it saw last: once written, the others are
forgotten (`forget`), with what the checks kept of their ended turns, and a session that
comes back has its summary read back from the bucket first (`remember`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from turnstream.audit.checks import CHECKED_KINDS, CheckConfig, Checks, Finding, TurnFacts
from turnstream.core.events import (
    AuditViolation,
    Event,
    InputRejected,
    SessionTurnStart,
    TurnEnded,
)
from turnstream.core.justification import Grounds
from turnstream.core.subjects import is_session_id
from turnstream.core.summary import (
    SUMMARY_KINDS,
    SessionSummary,
    count_event,
    evolve_summary,
)


@dataclass
class Auditor:
    checks: Checks = field(default_factory=Checks)
    summaries: dict[str, SessionSummary] = field(default_factory=dict)
    """By session, the one changed last at the end (what `forget` keeps)."""
    last_seq: int = 0
    """Everything up to this log sequence is folded in; anything at or below it is skipped."""
    dirty: set[str] = field(default_factory=set)
    """Sessions whose summary changed since the last `take_dirty`."""
    turned: set[str] = field(default_factory=set)
    """Of those, the ones whose turn started or ended (or got a violation): the changes a
    watcher waits for, written at once; the counters of the others can wait a little."""
    found: dict[str, Finding] = field(default_factory=dict)
    """Violations found and not yet handed out, by violation id."""
    reported: set[str] = field(default_factory=set)
    """Ids of violations handed out or already in the log: never reported twice."""
    violations: int = 0
    """`AuditViolation` events in the log."""

    @classmethod
    def with_config(cls, config: CheckConfig) -> Auditor:
        return cls(checks=Checks(config))

    def apply(self, seq: int, event: Event) -> bool:
        """Fold in the event at `seq`; False (and nothing changes) if it was folded before."""
        if seq <= self.last_seq:
            return False
        self.last_seq = seq
        session = event.session_id
        evolve_summary(self._changing(session), seq, event)
        if isinstance(event, _TURNING):
            self.turned.add(session)
        if isinstance(event, AuditViolation):
            self.violations += 1
            self.reported.add(event.id)
            self.found.pop(event.id, None)
        for finding in self.checks.observe(seq, event):
            self._found(finding)
        return True

    def count(self, seq: int, session_id: str, time: datetime) -> None:
        """Fold in the event at `seq` (after `last_seq`: `fold_message` skips what was
        folded before) of a kind neither the summary nor the checks read (not in
        `READ_KINDS`): it only counts in its session's summary."""
        self.last_seq = seq
        count_event(self._changing(session_id), seq, time)

    def _changing(self, session: str) -> SessionSummary:
        """The session's summary, now the most recently changed (and dirty)."""
        summary = self.summaries.pop(session, None)
        if summary is None:
            summary = SessionSummary(session)
        self.summaries[session] = summary
        self.dirty.add(session)
        return summary

    def forget(self, keep: int) -> list[str]:
        """Forget the summaries of all but the `keep` sessions changed last, and what the
        checks kept of their settled work; returns the sessions forgotten. A session whose
        summary is not written yet (dirty) or whose summary the bucket does not take
        (`is_session_id`) is kept: nothing but this has its state. One with work open (a
        turn queued or running) leaves its summary, which the bucket has, and keeps its
        checks' facts (its open turn, approvals, prompts): a burst of 10⁵ queued sessions
        would otherwise hold 10⁵ summaries until their turns end."""
        excess = len(self.summaries) - keep
        gone: list[str] = []
        settled: set[str] = set()
        for session, summary in self.summaries.items():  # the least recently changed first
            if len(gone) >= excess:
                break
            if session in self.dirty or not is_session_id(session):
                continue
            gone.append(session)
            if summary.status != "active" and not summary.open_turn:
                settled.add(session)
        for session in gone:
            del self.summaries[session]
        self.checks.forget(settled)
        return gone

    def remember(self, summary: SessionSummary) -> None:
        """Take back a forgotten session's summary, as it was written (it is current to its
        `last_seq`): its last ended turn counts as ended again for the checks, so a second
        `TurnEnded` of it is still a violation, and its profile's security mode and its
        workflows' stage tools judge its approvals again."""
        self.summaries.setdefault(summary.session_id, summary)
        if summary.security_mode is not None or summary.stage_tools:
            # what its approvals are judged by (`Checks.grounds`), forgotten with it
            grounds = Grounds(summary.security_mode, frozenset(summary.stage_tools or ()))
            self.checks.grounds.setdefault(summary.session_id, grounds)
        if summary.last_turn is not None and summary.open_turn != summary.last_turn:
            key = (summary.session_id, summary.last_turn)
            self.checks.turns.setdefault(key, TurnFacts(ended=1))

    def tick(self, now: datetime) -> None:
        """Look for turns open past their bound (the timer)."""
        for finding in self.checks.overdue(now):
            self._found(finding)

    def take_dirty(self, *, turned_only: bool = False) -> list[SessionSummary]:
        """The summaries that changed (`turned_only`: those whose turn started or ended)."""
        taken = self.turned if turned_only else self.dirty
        dirty = [self.summaries[session] for session in sorted(taken)]
        self.dirty -= taken
        self.turned.clear()
        return dirty

    def take_violations(self, now: datetime, source: str) -> list[AuditViolation]:
        """The violations to append, once each."""
        events = [finding.event(now, source) for finding in self.found.values()]
        self.reported.update(self.found)
        self.found.clear()
        return events

    def _found(self, finding: Finding) -> None:
        violation_id = finding.violation_id
        if violation_id not in self.reported:
            self.found.setdefault(violation_id, finding)


_TURNING = (SessionTurnStart, TurnEnded, InputRejected, AuditViolation)
"""The kinds that mark their session's summary to be written at once (all in
`SUMMARY_KINDS`)."""
READ_KINDS = frozenset(
    kind.model_fields["type"].default for kind in (*SUMMARY_KINDS, *CHECKED_KINDS)
)
"""The event kinds the fold reads (`apply`); any other is only counted (`count`)."""
