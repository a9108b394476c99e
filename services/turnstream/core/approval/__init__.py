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

from datetime import datetime
from functools import partial

from turnstream.core.approval.model import (
    AllowRule,
    ApprovalConfig,
    ApprovalState,
    Call,
    OpenInteraction,
    Proposal,
    Status,
    find,
)
from turnstream.core.approval.verdicts import Verdict, judge, mode_verdict, next_verdicts
from turnstream.core.events import (
    Event,
    InteractionAnswered,
    InteractionRequested,
    SecurityMode,
    SessionConfigured,
    ToolCallApproved,
    ToolCallDenied,
    ToolCallModeInvoked,
    ToolInvocationProposed,
    TurnEnded,
)
from turnstream.core.fold import Decision, projector, until_quiet
from turnstream.core.immutable import with_changes
from turnstream.core.inputs import Fact, Tick, WakeAt


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
    step = partial(next_verdicts, config=config, now=now, source=source, judging=True)
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
    step = partial(next_verdicts, config=config, now=now, source=source, judging=False)
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
    proposal = find(state, state.open.invocation_id)
    return (state.open, proposal) if proposal else None


def knows(state: ApprovalState, invocation_id: str) -> bool:
    """Whether `state` has folded the proposal of `invocation_id` (or its decision)."""
    return invocation_id in state.decided or find(state, invocation_id) is not None


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


__all__ = [
    "AllowRule",
    "ApprovalConfig",
    "ApprovalDecision",
    "ApprovalState",
    "Call",
    "OpenInteraction",
    "Proposal",
    "Status",
    "Verdict",
    "decide_approval",
    "decide_input",
    "evolve",
    "fold",
    "judge",
    "knows",
    "mode_verdict",
    "needs_person",
    "next_deadline",
    "open_interaction",
    "session_mode",
]
