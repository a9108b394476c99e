"""Invariant checks over the log, as events arrive: pure, the clock is an argument.

- exactly one `TurnEnded` per turn (`duplicate_terminal`, one per extra terminal event);
- no turn open past its wall-time bound (`turn_overdue`: found when the late `TurnEnded`
  arrives, or by `overdue(now)` on a timer for a turn that has not ended);
- no `ToolInvocationStarted`/`Succeeded` without an earlier `ToolCallApproved` for the
  same invocation (`unapproved_tool_run`, one per invocation);
- every `SubTurnSpawned` has exactly one `SubTurnEnded` (`duplicate_subturn_end`; none by
  its deadline + grace: `subturn_unended`, on the timer);
- every turn whose input had `replyTo` has exactly one `MessageSent` or `MessageDropped`
  for its reply (`duplicate_reply`; none by its `TurnEnded` + grace: `reply_missing`);
- every `ToolCallApproved` is justified by the log (`unjustified_approval`): the turn-runner
  may append one (it applies the approval rules itself), so the proposed call is judged
  again by `core.justification` from facts the runner cannot append, with the deployment's
  default mode and allowlist. Every approval is judged, whatever its `source` names (the
  appender writes that field itself); the approval service's rest on a person's answer.

Each finding has a key, and its `AuditViolation` an id derived from the key
(`derived_id`): a redelivered event, a restart or a timer that fires again produce
the same id, which the log's `Nats-Msg-Id` dedup and the auditor's own set turn into a
no-op.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from turnstream.core import justification
from turnstream.core.approval import ApprovalConfig
from turnstream.core.events import (
    AuditViolation,
    AuditViolationData,
    Envelope,
    Event,
    EventBase,
    InputAccepted,
    InputRejected,
    InteractionAnswered,
    InteractionRequested,
    MessageDropped,
    MessageSent,
    SessionConfigured,
    SessionTurnStart,
    StageGranted,
    SubTurnEnded,
    SubTurnSpawned,
    ToolCallApproved,
    ToolCallDenied,
    ToolInvocationProposed,
    ToolInvocationStarted,
    ToolInvocationSucceeded,
    TurnEnded,
    ViolationKind,
    WorkflowAttached,
    stamp,
)
from turnstream.core.ids import derived_id
from turnstream.core.justification import Grounds, Justified, ToolCall

CHECKED_KINDS = (
    SessionTurnStart,
    TurnEnded,
    InputAccepted,
    InputRejected,
    MessageSent,
    MessageDropped,
    SubTurnSpawned,
    SubTurnEnded,
    ToolCallApproved,
    ToolInvocationStarted,
    ToolInvocationSucceeded,
    ToolInvocationProposed,
    ToolCallDenied,
    SessionConfigured,
    WorkflowAttached,
    InteractionRequested,
    InteractionAnswered,
    StageGranted,
)
"""The kinds `Checks.observe` reads: one for each case there (an event of another kind
changes nothing, so the audit does not decode it)."""


@dataclass(frozen=True, slots=True)
class CheckConfig:
    max_turn_seconds: float = 600.0
    """The turn-runner's wall-time bound (`TURNSTREAM_MAX_TURN_SECONDS`)."""
    grace_s: float = 60.0
    """The runner ends a turn at its bound; past bound + grace, nobody did."""
    approval: ApprovalConfig = field(default_factory=ApprovalConfig)
    """The deployment's default security mode and allowlist (an approval is judged by)."""

    @property
    def bound(self) -> timedelta:
        return timedelta(seconds=self.max_turn_seconds + self.grace_s)


@dataclass(slots=True)
class TurnFacts:
    """What the checks remember of one turn: its start while it is open (for the timer),
    then only how many times it ended (a log of millions of turns keeps no event)."""

    start: OpenTurn | None = None
    ended: int = 0


@dataclass(frozen=True, slots=True)
class OpenTurn:
    """What the timer needs of a turn's `SessionTurnStart`: when, and what a violation about
    it is filed under. Not the event: a burst holds every started turn at once
    (`bench/audit_open_turns.py`: a decoded event is 2.8 KB, the whole fold's share of an
    open turn 1.0 KB with this)."""

    id: str
    time: datetime
    envelope: Envelope

    @classmethod
    def of(cls, event: EventBase) -> OpenTurn:
        return cls(event.id, event.time, Envelope.of(event))


@dataclass(frozen=True, slots=True)
class Finding:
    kind: ViolationKind
    key: str
    at: datetime
    """Fixes the id's timestamp: the same finding always gets the same id."""
    detail: str
    about: EventBase | OpenTurn
    """The event the envelope (session, chat, turn, trace) is taken from."""
    cause: EventBase | None = None
    cause_seq: int | None = None
    invocation_id: str | None = None

    @property
    def violation_id(self) -> str:
        return derived_id("audit", self.key, self.at)

    def event(self, now: datetime, source: str) -> AuditViolation:
        about = self.about
        data = AuditViolationData(
            kind=self.kind,
            detail=self.detail,
            event_id=self.cause.id if self.cause else None,
            event_seq=self.cause_seq,
            invocation_id=self.invocation_id,
        )
        return stamp(
            AuditViolation,
            data,
            about.envelope if isinstance(about, OpenTurn) else Envelope.of(about),
            event_id=self.violation_id,
            time=now,
            source=source,
            causation_id=self.cause.id if self.cause else about.id,
        )


@dataclass(slots=True)
class Checks:
    """The checks' state, a fold over the whole log: mutable, not copied per event."""

    config: CheckConfig = field(default_factory=CheckConfig)
    turns: dict[tuple[str, str], TurnFacts] = field(default_factory=dict)
    open: dict[tuple[str, str], TurnFacts] = field(default_factory=dict)
    """Turns started and not ended, for the timer."""
    approved: set[tuple[str, str]] = field(default_factory=set)
    """(session, invocation) pairs with a `ToolCallApproved`."""
    children: dict[tuple[str, str], tuple[SubTurnSpawned, datetime, int]] = field(
        default_factory=dict
    )
    """(session, invocation) of each sub-turn: its spawn, deadline, and ends seen."""
    replies: dict[tuple[str, str], tuple[EventBase, int]] = field(default_factory=dict)
    """(session, turn) of each input with `replyTo`: the event to time it by (its input,
    then its `TurnEnded`), and how many `MessageSent`/`MessageDropped` answered it."""
    grounds: dict[str, Grounds] = field(default_factory=dict)
    """What an approval may rest on, by session (those with any such fact)."""
    proposals: dict[tuple[str, str], ToolCall] = field(default_factory=dict)
    """(session, invocation) of each proposed call with no verdict yet: what is judged."""

    def observe(self, seq: int, event: Event) -> list[Finding]:
        """Fold one event in; return what it shows to be wrong."""
        match event:
            case SessionTurnStart() if event.turn_id:
                key = (event.session_id, event.turn_id)
                facts = self.turns.setdefault(key, TurnFacts())
                if facts.start is None and not facts.ended:
                    facts.start = OpenTurn.of(event)
                    self.open[key] = facts
            case TurnEnded() if event.turn_id:
                key = (event.session_id, event.turn_id)
                if key in self.replies:
                    self.replies[key] = (event, self.replies[key][1])
                return self._ended(seq, event)
            case InputAccepted(data=data) | InputRejected(data=data) if (
                data.reply_to and event.turn_id
            ):
                self.replies.setdefault((event.session_id, event.turn_id), (event, 0))
            case MessageSent(data=data) | MessageDropped(data=data) if (
                data.cause == "replyTo" and event.turn_id
            ):
                return self._replied(seq, event, (event.session_id, event.turn_id))
            case SubTurnSpawned(data=data):
                deadline = event.time + timedelta(seconds=data.deadline_s)
                key = (event.session_id, data.invocation_id)
                self.children.setdefault(key, (event, deadline, 0))
            case SubTurnEnded(data=data):
                return self._child_ended(seq, event, (event.session_id, data.invocation_id))
            case (
                SessionConfigured()
                | WorkflowAttached()
                | InteractionRequested()
                | InteractionAnswered()
                | StageGranted()
            ):
                grounds = self.grounds.setdefault(event.session_id, Grounds())
                justification.evolve(grounds, event)
            case ToolInvocationProposed(data=data) if data.known and not data.skip:
                self.proposals[(event.session_id, data.invocation_id)] = ToolCall.proposed(event)
            case ToolCallApproved(data=data):
                self.approved.add((event.session_id, data.invocation_id))
                return self._judged(seq, event)
            case ToolCallDenied(data=data):
                self._settled(event.session_id, data.invocation_id)
            case ToolInvocationStarted(data=data) | ToolInvocationSucceeded(data=data):
                if (event.session_id, data.invocation_id) not in self.approved:
                    return [self._unapproved(seq, event, data.invocation_id)]
            case _:
                pass
        return []

    def forget(self, sessions: set[str]) -> None:
        """Drop what is kept of `sessions`' settled work: ended turns, approvals, answered
        replies and ended sub-turns (what is still open stays, for the timer). A second
        end of one of them coming later is not caught (`Auditor.remember` brings back the
        last ended turn of a session)."""
        if not sessions:
            return
        self.turns = {
            k: f for k, f in self.turns.items() if k[0] not in sessions or f.start is not None
        }
        self.approved = {k for k in self.approved if k[0] not in sessions}
        self.replies = {k: r for k, r in self.replies.items() if k[0] not in sessions or not r[1]}
        self.children = {k: c for k, c in self.children.items() if k[0] not in sessions or not c[2]}
        self.grounds = {k: g for k, g in self.grounds.items() if k not in sessions}
        self.proposals = {k: c for k, c in self.proposals.items() if k[0] not in sessions}

    def overdue(self, now: datetime) -> list[Finding]:
        """Turns still open past their bound at `now` (run on a timer)."""
        bound = self.config.bound
        grace = timedelta(seconds=self.config.grace_s)
        found = [
            self._overdue(facts.start, now - facts.start.time)
            for facts in self.open.values()
            if facts.start is not None and now - facts.start.time > bound
        ]
        for spawned, deadline, ends in self.children.values():
            if not ends and now > deadline + grace:
                detail = (
                    f"sub-turn {spawned.data.child_session_id} (invocation "
                    f"{spawned.data.invocation_id}) has no SubTurnEnded past its deadline"
                )
                key = f"unended:{spawned.session_id}:{spawned.data.invocation_id}"
                found.append(Finding("subturn_unended", key, deadline + grace, detail, spawned))
        for ended, answers in self.replies.values():
            if not answers and isinstance(ended, TurnEnded) and now > ended.time + grace:
                detail = f"turn {ended.turn_id} ended without a MessageSent or MessageDropped"
                key = f"noreply:{ended.session_id}:{ended.turn_id}"
                found.append(Finding("reply_missing", key, ended.time + grace, detail, ended))
        return found

    def _replied(self, seq: int, event: EventBase, key: tuple[str, str]) -> list[Finding]:
        timed_by, answers = self.replies.get(key, (event, 0))
        self.replies[key] = (timed_by, answers + 1)
        if answers + 1 < 2:
            return []
        detail = f"turn {event.turn_id} sent its reply {answers + 1} times (seq {seq})"
        finding = Finding("duplicate_reply", f"reply:{event.id}", event.time, detail, event)
        return [finding]

    def _child_ended(self, seq: int, event: SubTurnEnded, key: tuple[str, str]) -> list[Finding]:
        if key not in self.children:
            return []
        spawned, deadline, ends = self.children[key]
        self.children[key] = (spawned, deadline, ends + 1)
        if ends + 1 < 2:
            return []
        detail = (
            f"sub-turn {event.data.child_session_id} has {ends + 1} SubTurnEnded events "
            f"(this one at seq {seq})"
        )
        finding = Finding("duplicate_subturn_end", f"subend:{event.id}", event.time, detail, event)
        return [finding]

    def _ended(self, seq: int, event: TurnEnded) -> list[Finding]:
        assert event.turn_id is not None
        key = (event.session_id, event.turn_id)
        facts = self.turns.setdefault(key, TurnFacts())
        facts.ended += 1
        self.open.pop(key, None)
        start, facts.start = facts.start, None  # an ended turn keeps only its count
        if facts.ended > 1:
            detail = (
                f"turn {event.turn_id} has {facts.ended} TurnEnded events "
                f"(this one at seq {seq}: {event.data.status})"
            )
            finding = Finding(
                "duplicate_terminal", f"terminal:{event.id}", event.time, detail, event, event, seq
            )
            return [finding]
        if start is not None and event.time - start.time > self.config.bound:
            return [self._overdue(start, event.time - start.time, event, seq)]
        return []

    def _overdue(
        self,
        start: OpenTurn,
        open_for: timedelta,
        ended: EventBase | None = None,
        seq: int | None = None,
    ) -> Finding:
        # keyed by the turn and timed at its deadline: the timer and a late TurnEnded
        # report the same violation
        config = self.config
        state = "ended" if ended else "is still open"
        detail = (
            f"turn {start.envelope.turn_id} {state} after {open_for.total_seconds():.0f} s; "
            f"its bound is {config.max_turn_seconds:.0f} s (+{config.grace_s:.0f} s grace)"
        )
        key = f"overdue:{start.envelope.session_id}:{start.envelope.turn_id}"
        return Finding("turn_overdue", key, start.time + config.bound, detail, start, ended, seq)

    def _judged(self, seq: int, event: ToolCallApproved) -> list[Finding]:
        """An approval judged again from the log's facts (`core.justification`); one that
        is not justified is a finding. An approval of no proposal seen is not judged."""
        invocation_id = event.data.invocation_id
        call = self.proposals.get((event.session_id, invocation_id))
        if call is None:
            return []
        grounds = self.grounds.get(event.session_id) or Grounds()
        verdict = justification.justify(call, grounds, self.config.approval)
        self._settled(event.session_id, invocation_id)
        if isinstance(verdict, Justified):
            return []
        detail = (
            f"ToolCallApproved{{{event.data.authority}}} appended by {event.source}: "
            f"{verdict.reason}"
        )
        key = f"unjustified:{event.session_id}:{invocation_id}"
        return [
            Finding(
                "unjustified_approval", key, event.time, detail, event, event, seq, invocation_id
            )
        ]

    def _settled(self, session_id: str, invocation_id: str) -> None:
        """A call has its verdict: what was kept to judge it goes."""
        self.proposals.pop((session_id, invocation_id), None)
        grounds = self.grounds.get(session_id)
        if grounds is not None:
            grounds.settled(invocation_id)

    def _unapproved(self, seq: int, event: EventBase, invocation_id: str) -> Finding:
        detail = f"{event.type} for invocation {invocation_id} without a ToolCallApproved"
        key = f"unapproved:{event.session_id}:{invocation_id}"
        return Finding(
            "unapproved_tool_run", key, event.time, detail, event, event, seq, invocation_id
        )
