"""The approval rules of one session: which proposed tool calls may run.

    ToolInvocationProposed ─► ToolCallModeInvoked{mode, verdict}
        auto ─────────────► ToolCallApproved{mode}
        deny ─────────────► ToolCallDenied{mode}
        allowlist, a rule matches ─► ToolCallApproved{allowlist}
        ask, or an allowlist miss ─► queued ─► InteractionRequested{deadline}  (one open per
                                   session, in call order)
            InteractionAnswered ─► ToolCallApproved | ToolCallDenied {interaction}
            deadline passed     ─► ToolCallDenied{interaction, timedOut}
    inside a workflow stage (the proposal carries its envelope), before any mode:
        a tool in `allowedTools` ─► ToolCallApproved{workflow}
        any other tool ─► queued ─► InteractionRequested{grantStageTool}
            approved ─► StageGranted + ToolCallApproved{workflow}
            denied, timed out ─► ToolCallDenied{workflow, "GrantDenied: …"}

The security mode is fixed for a session at its first proposal (the first
`ToolCallModeInvoked` records it; `session_mode`), so changing the deployment default
later does not change sessions already running. Deadlines are in the log, so they survive
restarts. Event ids are derived from the invocation or interaction they decide, so two
deciders (or a redelivery) produce the same ids and the log keeps one copy.

Two processes apply these rules: the turn-runner `judge`s each call in the decision that
proposes it (all but the prompts), so an auto call runs with no hop to another process;
the approval service (`decide_input`) asks a person, one open prompt per session, for what
`needs_person`. `decide_approval` is both parts at once (the reference they are tested by).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Literal, assert_never

from turnstream.core.events import (
    Authority,
    Envelope,
    Event,
    EventBase,
    InteractionAnswered,
    InteractionRequested,
    InteractionRequestedData,
    SecurityMode,
    Sender,
    SessionConfigured,
    StageEnvelope,
    StageGranted,
    StageGrantedData,
    ToolCallApproved,
    ToolCallApprovedData,
    ToolCallDenied,
    ToolCallDeniedData,
    ToolCallModeInvoked,
    ToolCallModeInvokedData,
    ToolInvocationProposed,
    TurnEnded,
    stamp,
)
from turnstream.core.fold import Decision, projector, until_quiet
from turnstream.core.ids import derived_id
from turnstream.core.immutable import with_changes
from turnstream.core.inputs import Fact, Tick, WakeAt

Status = Literal["new", "queued", "asking", "decided"]


@dataclass(frozen=True)
class AllowRule:
    """Approve a call whose tool name matches `tool` and each argument its glob."""

    tool: str
    args: dict[str, str] = field(default_factory=dict)

    def matches(self, tool: str, args: Mapping[str, Any]) -> bool:
        if not fnmatch.fnmatchcase(tool, self.tool):
            return False
        return all(
            name in args and fnmatch.fnmatchcase(str(args[name]), pattern)
            for name, pattern in self.args.items()
        )


@dataclass(frozen=True)
class ApprovalConfig:
    default_mode: SecurityMode = "ask"
    allowlist: tuple[AllowRule, ...] = ()
    answer_timeout_s: float = 300.0


@dataclass(frozen=True)
class Call:
    """What the rules read of a proposed call, and what its verdicts are derived from: the
    proposal's id, time and envelope (the turn-runner knows them without the event)."""

    invocation_id: str
    tool: str
    args: dict[str, Any]
    stage: StageEnvelope | None
    proposed_id: str
    proposed_at: datetime
    envelope: Envelope

    @classmethod
    def of(cls, event: ToolInvocationProposed) -> Call:
        d = event.data
        where = Envelope.of(event)
        return cls(d.invocation_id, d.tool, d.args, d.envelope, event.id, event.time, where)


@dataclass(frozen=True)
class Proposal:
    event: ToolInvocationProposed
    status: Status = "new"
    """new: the turn-runner's verdict (`judge`) is to come; queued: a person's answer is."""

    @property
    def invocation_id(self) -> str:
        return self.event.data.invocation_id

    @property
    def call(self) -> Call:
        return Call.of(self.event)


@dataclass(frozen=True)
class OpenInteraction:
    interaction_id: str
    invocation_id: str
    deadline: datetime
    requested_id: str
    answer: InteractionAnswered | None = None


@dataclass(frozen=True)
class ApprovalState:
    session_id: str
    mode: SecurityMode | None = None
    turn_id: str | None = None
    proposals: tuple[Proposal, ...] = ()
    """Proposals still to decide (a stage group's turns propose at once), in call order."""
    open: OpenInteraction | None = None
    decided: frozenset[str] = frozenset()
    """Invocations with a decision in the log: a redelivered proposal of one is not judged
    again."""


def evolve(state: ApprovalState, event: Event) -> ApprovalState:
    """Fold the events the approval decider cares about; ignore the rest."""
    match event:
        case SessionConfigured(data=data) if data.security_mode is not None:
            mode = session_mode(state.mode, event)
            return state if mode == state.mode else with_changes(state, mode=mode)
        case ToolInvocationProposed(data=data) if data.known and not data.skip:
            if event.turn_id != state.turn_id:  # keep what other turns still wait for
                undecided = tuple(p for p in state.proposals if p.status != "decided")
                state = with_changes(state, turn_id=event.turn_id, proposals=undecided)
            if data.invocation_id in state.decided or any(
                p.invocation_id == data.invocation_id for p in state.proposals
            ):
                return state
            proposal = Proposal(event, "queued" if needs_person(event) else "new")  # a grant
            return with_changes(state, proposals=(*state.proposals, proposal))
        case ToolCallModeInvoked(data=data):
            mode = session_mode(state.mode, event)
            state = state if mode == state.mode else with_changes(state, mode=mode)
            status: Status = "queued" if data.verdict == "ask" else "decided"
            return _set(state, data.invocation_id, status, only_from="new")
        case InteractionRequested(data=data):
            opened = OpenInteraction(
                data.interaction_id, data.invocation_id, data.deadline, event.id
            )
            return with_changes(_set(state, data.invocation_id, "asking"), open=opened)
        case InteractionAnswered(data=data):
            if state.open and state.open.interaction_id == data.interaction_id:
                if state.open.answer is None:
                    return with_changes(state, open=with_changes(state.open, answer=event))
            return state
        case ToolCallApproved(data=data) | ToolCallDenied(data=data):
            state = _set(state, data.invocation_id, "decided")
            state = with_changes(state, decided=state.decided | {data.invocation_id})
            if state.open and state.open.invocation_id == data.invocation_id:
                state = with_changes(state, open=None)
            return state
        case TurnEnded():
            # the turn is over: what it still waited for is moot, and must not hold up
            # the prompts of the session's other turns
            gone = {p.invocation_id for p in state.proposals if p.event.turn_id == event.turn_id}
            if not gone:
                return state
            kept = tuple(p for p in state.proposals if p.invocation_id not in gone)
            still_open = state.open
            if still_open is not None and still_open.invocation_id in gone:
                still_open = None
            # a redelivered proposal of the ended turn must not be judged again
            decided = state.decided | gone
            return with_changes(state, proposals=kept, open=still_open, decided=decided)
        case _:
            return state


fold = projector(evolve)


def session_mode(mode: SecurityMode | None, event: Event) -> SecurityMode | None:
    """The session's security mode after `event`, `mode` before it: fixed by its first
    proposal's verdict (`ToolCallModeInvoked`), or before that by its agent's profile
    (`SessionConfigured`); None while neither (the deployment's default applies)."""
    if mode is None and isinstance(event, SessionConfigured):
        return event.data.security_mode
    if mode is None and isinstance(event, ToolCallModeInvoked):
        return event.data.mode
    return mode


def needs_person(event: Event) -> bool:
    """Whether a logged fact is the approval service's: not a verdict the turn-runner
    gave a call without a person (`judge`), nor a proposal it judges."""
    match event:
        case ToolCallModeInvoked(data=data):
            return data.verdict == "ask"
        case ToolInvocationProposed(data=data):
            outside = data.envelope is not None and data.tool not in data.envelope.allowed_tools
            return data.known and not data.skip and outside  # a grant: the runner cannot judge
        case _:
            return True


def decide_approval(
    state: ApprovalState, config: ApprovalConfig, now: datetime, source: str
) -> list[Event]:
    """Every approval event that follows from `state` at time `now`: the whole decider,
    the turn-runner's verdicts (`judge`) and the approval service's prompts together."""
    step = partial(_next_step, config=config, now=now, source=source, judging=True)
    return list(until_quiet(state, step, fold).events)


ApprovalDecision = Decision[ApprovalState, WakeAt]
"""What one input decides: the events, the state they fold to, and what the shell must do
(wake the session at its open prompt's deadline)."""


def decide_input(
    state: ApprovalState, input: Fact | Tick, config: ApprovalConfig, now: datetime, source: str
) -> ApprovalDecision:
    """The approval service's one entry point: a fact folded in (or a wake-up), then every
    decision that follows, and the deadline to wake up at. A call the turn-runner judges
    waits for its verdict (`judge`): the service decides only what needs a person."""
    if isinstance(input, Fact):
        state = evolve(state, input.event)  # folding a redelivered fact twice is harmless
    step = partial(_next_step, config=config, now=now, source=source, judging=False)
    decided = until_quiet(state, step, fold)
    deadline = next_deadline(decided.state)
    wake = (WakeAt(deadline),) if deadline is not None else ()
    return Decision(decided.events, decided.state, wake)


def next_deadline(state: ApprovalState) -> datetime | None:
    """When the shell must wake this session up to time out its open prompt."""
    return state.open.deadline if state.open and state.open.answer is None else None


def open_interaction(state: ApprovalState) -> tuple[OpenInteraction, Proposal] | None:
    """The prompt waiting for an answer, with the proposal it is about."""
    if state.open is None:
        return None
    proposal = _find(state, state.open.invocation_id)
    return (state.open, proposal) if proposal else None


def judge(
    call: Call, mode: SecurityMode | None, config: ApprovalConfig, now: datetime, source: str
) -> list[Event]:
    """The verdict on a proposed call that needs no person, in the session's `mode` (None:
    not fixed yet, the default's): `ToolCallModeInvoked` and `ToolCallApproved` or
    `ToolCallDenied`; inside a workflow stage, `ToolCallApproved{workflow}`. A call that
    needs a person gets `ToolCallModeInvoked{ask}` (the approval service asks); a stage's
    call outside its allowed tools gets nothing (the approval service asks for a grant)."""
    if call.stage is not None:  # inside a workflow stage's envelope: the mode gate is bypassed
        if call.tool not in call.stage.allowed_tools:
            return []
        return [_approved(call, "workflow", now, source, reason=f"stage {call.stage.stage}")]
    mode = mode or config.default_mode
    first_id = derived_id(call.invocation_id, "mode", call.proposed_at)
    verdict = mode_verdict(mode, call.tool, call.args, config)
    events: list[Event] = []
    if verdict == "approve":
        authority: Authority = "allowlist" if mode == "allowlist" else "mode"
        events = [_approved(call, authority, now, source, cause=first_id)]
    elif verdict == "deny":
        reason = "the session's security mode is deny"
        events = [_denied(call, "mode", reason, now, source, cause=first_id)]
    invoked = ToolCallModeInvokedData(invocation_id=call.invocation_id, mode=mode, verdict=verdict)
    first = _make(call, ToolCallModeInvoked, invoked, now, source, "mode", call.proposed_id)
    return [first, *events]


Verdict = Literal["approve", "deny", "ask"]


def mode_verdict(
    mode: SecurityMode, tool: str, args: Mapping[str, Any], config: ApprovalConfig
) -> Verdict:
    """What a session's security `mode` says of a call with no person: `approve` (auto, or
    allowlist with a rule that matches the tool and its arguments), `deny`, or `ask` (a
    person decides). The turn-runner judges by it (`judge`), the tool-executor and the
    audit check approvals by it (`turnstream.core.justification`)."""
    match mode:
        case "auto":
            return "approve"
        case "deny":
            return "deny"
        case "allowlist":
            matched = any(rule.matches(tool, args) for rule in config.allowlist)
            return "approve" if matched else "ask"
        case "ask":
            return "ask"
        case _:
            assert_never(mode)


def _next_step(
    state: ApprovalState,
    config: ApprovalConfig,
    now: datetime,
    source: str,
    judging: bool,
) -> list[Event]:
    new = next((p for p in state.proposals if p.status == "new"), None) if judging else None
    if new is not None:
        return judge(new.call, state.mode, config, now, source)
    if state.open is not None:
        proposal = _find(state, state.open.invocation_id)
        if proposal is None:
            return []
        answer = state.open.answer
        envelope = proposal.event.data.envelope
        authority: Authority = "interaction" if envelope is None else "workflow"
        grant = "GrantDenied: " if envelope is not None else ""
        if answer is not None:
            by, why = answer.data.sender, answer.data.reason
            if answer.data.decision == "approve":
                approved = _approved(proposal.call, authority, now, source, by, why, answer.id)
                if envelope is None:
                    return [approved]
                return [_granted(proposal, now, source, by, answer.id), approved]
            reason = grant + (why or f"{by.kind} {by.id} denied it")
            denied = _denied(proposal.call, authority, reason, now, source, by=by, cause=answer.id)
            return [denied]
        if now >= state.open.deadline:
            return [
                _denied(
                    proposal.call,
                    authority,
                    f"{grant}no answer by the deadline ({config.answer_timeout_s:.0f} s)",
                    now,
                    source,
                    timed_out=True,
                    cause=state.open.requested_id,
                )
            ]
        return []
    queued = next((p for p in state.proposals if p.status == "queued"), None)
    if queued is not None:
        return [_ask(queued, config, now, source)]
    return []


def _ask(proposal: Proposal, config: ApprovalConfig, now: datetime, source: str) -> Event:
    data = proposal.event.data
    interaction_id = derived_id(data.invocation_id, "interaction", proposal.event.time)
    args = ", ".join(f"{k}={v!r}" for k, v in data.args.items())
    prompt = f"allow {data.tool}({args})?"
    if data.envelope is not None:
        prompt = (
            f"stage {data.envelope.stage} wants {data.tool}({args}), outside its allowed "
            f"tools {data.envelope.allowed_tools}: grant it?"
        )
    requested = InteractionRequestedData(
        interaction_id=interaction_id,
        invocation_id=data.invocation_id,
        tool=data.tool,
        args=data.args,
        deadline=now + timedelta(seconds=config.answer_timeout_s),
        prompt=prompt,
        kind="tool" if data.envelope is None else "grantStageTool",
    )
    call = proposal.call
    return _make(call, InteractionRequested, requested, now, source, "ask", proposal.event.id)


def _approved(
    call: Call,
    authority: Authority,
    now: datetime,
    source: str,
    by: Sender | None = None,
    reason: str | None = None,
    cause: str | None = None,
) -> Event:
    data = ToolCallApprovedData(
        invocation_id=call.invocation_id, authority=authority, answered_by=by, reason=reason
    )
    return _make(call, ToolCallApproved, data, now, source, "decision", cause)


def _granted(proposal: Proposal, now: datetime, source: str, by: Sender, cause: str) -> Event:
    data = proposal.event.data
    assert data.envelope is not None
    granted = StageGrantedData(
        stage=data.envelope.stage,
        stage_execution_id=data.envelope.stage_execution_id,
        tool=data.tool,
        invocation_id=data.invocation_id,
        answered_by=by,
    )
    return _make(proposal.call, StageGranted, granted, now, source, "grant", cause)


def _denied(
    call: Call,
    authority: Authority,
    reason: str,
    now: datetime,
    source: str,
    *,
    by: Sender | None = None,
    timed_out: bool = False,
    cause: str | None = None,
) -> Event:
    data = ToolCallDeniedData(
        invocation_id=call.invocation_id, authority=authority, reason=reason,
        timed_out=timed_out, answered_by=by,
    )  # fmt: skip
    return _make(call, ToolCallDenied, data, now, source, "decision", cause)


def _make(
    call: Call,
    cls: type[EventBase],
    data: Any,
    now: datetime,
    source: str,
    purpose: str,
    cause: str | None,
) -> Event:
    event_id = derived_id(call.invocation_id, purpose, call.proposed_at)
    cause = cause or call.proposed_id
    event = stamp(
        cls, data, call.envelope, event_id=event_id, time=now, source=source, causation_id=cause
    )
    return event  # type: ignore[return-value]


def knows(state: ApprovalState, invocation_id: str) -> bool:
    """Whether `state` has folded the proposal of `invocation_id` (or its decision)."""
    return invocation_id in state.decided or _find(state, invocation_id) is not None


def _find(state: ApprovalState, invocation_id: str) -> Proposal | None:
    return next((p for p in state.proposals if p.invocation_id == invocation_id), None)


def _set(
    state: ApprovalState, invocation_id: str, status: Status, only_from: Status | None = None
) -> ApprovalState:
    proposals = tuple(
        with_changes(p, status=status)
        if p.invocation_id == invocation_id and (only_from is None or p.status == only_from)
        else p
        for p in state.proposals
    )
    return with_changes(state, proposals=proposals)
