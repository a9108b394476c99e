"""The session's one decider: one input in, a `Decision` out (events, state, effects).

    input                        what it decides
    Fact(event)                  the fact folded in (a result, an approval, an input, …),
                                 then everything that follows from it
    Tick()                       whatever follows now (a bound, a deferred gate, a lease)
    ProviderDone(turn, outcome)  the turn's model call ended: its events, then what follows
    ToolCallReady(turn, call)    a tool call streamed complete: proposed at once
    ToolHooksSaid(turn, …)       the guard/transform hooks' verdicts on approved calls
    StageHooksSaid(turn, …)      the verdict of the hooks at a hook point (`HookPoint`:
                                 the input, the model request and response, tool
                                 results, a compaction, the turn's stop, the reply)
    WorkflowHookSaid(ex, …)      a workflow gate's or asserter's answer
    Published(keys)              messages to other sessions are published: record them
    StorageRefused(reason)       the log refused an append for want of storage: every live
                                 turn ends failed (`storage_full`), then what follows
    ContextGathered(turn, …)     the context providers' answers for the turn's requests

and what the new state asks the shell to do (`effects_of`), every time:

    Providers(live, calls)       the model calls that should be in flight: start the ones
                                 missing, cancel those of turns no longer live
    RunToolHooks / RunStageHooks / RunWorkflowHook
                                 the first hook a turn or stage waits for; its answer
                                 comes back as the next input
    GatherContext(turn, request) the context providers a turn waits for (its answer
                                 comes back as the next input, like a hook's)
    TimeTurns(live)              each live turn's wall-time bound (a Tick when it passes)
    WakeAt(at)                   when a deferred gate, a retry's backoff or a sub-turn's
                                 deadline ends
    Deliver(messages)            publish these to other sessions' inbound subjects (a
                                 reply, a send_message, a sub-turn's input, an interrupt),
                                 each with its derived `Nats-Msg-Id`; then `Published`

A stage left and the next entered go out as one event (`turnstream.core.events.stages`).
The shell (`turnstream.turn_runner.session`) appends the events, performs the effects and
feeds their answers back: it knows this module and nothing else of the core's steps. Both
lists are unions (`Input`, `Effect`) matched to the end (`assert_never`) here (`_step`,
`effects_of`) and in the shell (`perform`): a new input or effect one of them forgets
fails the type checker.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import assert_never

from turnstream.core.events import joined
from turnstream.core.fold import Decision
from turnstream.core.inputs import Fact, Tick, WakeAt
from turnstream.core.session import outbound, subturns
from turnstream.core.session.agent import with_agent
from turnstream.core.session.fold import evolve, fold
from turnstream.core.session.outbound import Outbound
from turnstream.core.session.run import (
    GATE,
    awaiting_workflow_hooks,
    follow_session,
    next_wakeup,
    record_assert,
    record_gate,
    record_on_turn,
    turn_views,
)
from turnstream.core.session.state import SessionState
from turnstream.core.turn import (
    ChatState,
    Context,
    HookPoint,
    HookSubject,
    HookVerdict,
    ProviderOutcome,
    ProviderRequest,
    StageHookVerdict,
    ToolCall,
    ToolCallState,
    TurnConfig,
    awaiting_hooks,
    awaiting_stage_hooks,
    compose_request,
    hook_subject,
    needs_provider_call,
)
from turnstream.core.turn.answers import (
    record_context,
    record_hook_verdicts,
    record_provider_result,
    record_stage_hooks,
    record_storage_refused,
    record_tool_call_ready,
)
from turnstream.core.turn.context import ContextGathered, GatherContext, awaiting_context
from turnstream.core.workflow.definition import assert_verdict, gate_outcome
from turnstream.core.workflow.state import StageRun

# -- inputs ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProviderDone:
    turn_id: str
    outcome: ProviderOutcome


@dataclass(frozen=True, slots=True)
class ToolCallReady:
    """The model finished one tool call's block while it streams on."""

    turn_id: str
    call: ToolCall
    first_byte_at: datetime


@dataclass(frozen=True, slots=True)
class ToolHooksSaid:
    turn_id: str
    verdicts: tuple[HookVerdict, ...]


@dataclass(frozen=True, slots=True)
class StageHooksSaid:
    turn_id: str
    verdict: StageHookVerdict


@dataclass(frozen=True, slots=True)
class WorkflowHookSaid:
    """What the first workflow hook that answered at `point` (`CheckGate` or `Assert`)
    said about the stage execution; `decide_session` reads it as that point's outcome."""

    execution_id: str
    point: str
    verdict: str
    """The hook's word: pass / defer / block at a gate, ok / retry / fail at an assert
    (either point takes the other's words too: `gate_outcome`, `assert_verdict`)."""
    hook: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Published:
    """The shell published these `Deliver` messages and JetStream acknowledged them;
    `refused`: those the server refused to take (key, why), never to be sent."""

    keys: frozenset[str]
    refused: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class StorageRefused:
    """The log refused the session's events for want of storage (the shell has reloaded
    the session: the state is what the log holds): end the turns in flight."""

    reason: str


Input = (
    Fact
    | Tick
    | ProviderDone
    | ToolCallReady
    | ToolHooksSaid
    | StageHooksSaid
    | WorkflowHookSaid
    | Published
    | ContextGathered
    | StorageRefused
)

# -- effects --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Providers:
    """The turns still live, and the model calls they wait for."""

    live: frozenset[str]
    calls: tuple[ProviderRequest, ...]


@dataclass(frozen=True, slots=True)
class RunToolHooks:
    turn_id: str
    calls: tuple[ToolCallState, ...]


@dataclass(frozen=True, slots=True)
class RunStageHooks:
    """Run the guard and transform hooks at the turn's hook point."""

    turn_id: str
    stage: HookPoint
    subject: HookSubject


@dataclass(frozen=True, slots=True)
class RunWorkflowHook:
    point: str
    """`CheckGate` or `Assert`."""
    execution: StageRun


@dataclass(frozen=True, slots=True)
class TimeTurns:
    live: frozenset[str]


@dataclass(frozen=True, slots=True)
class Deliver:
    """Messages to publish to other sessions (`turnstream.core.session.outbound`)."""

    messages: tuple[Outbound, ...]


Effect = (
    Providers
    | RunToolHooks
    | RunStageHooks
    | RunWorkflowHook
    | TimeTurns
    | WakeAt
    | Deliver
    | GatherContext
)
HookEffect = RunToolHooks | RunStageHooks | RunWorkflowHook | GatherContext
SessionDecision = Decision[SessionState, Effect]
"""What the session's decider answers: the events, the state they fold to, its effects."""


def decide_session(
    state: SessionState, input: Input, config: TurnConfig, ctx: Context
) -> SessionDecision:
    """The events that follow from `input` in `state`, the state they fold to, and the
    effects that state asks for."""
    if isinstance(input, Fact):
        state = evolve(state, input.event)
    config = with_agent(config, state.agent, state.security_mode)
    step = _step(state, input, config, ctx)
    decided = follow_session(step.state, config, ctx)
    # a stage the answer closed and the next the decider entered are one event
    events = joined(step.events, decided.events)
    return Decision(events, decided.state, effects_of(decided.state, config, ctx.now))


def _step(
    state: SessionState, input: Input, config: TurnConfig, ctx: Context
) -> Decision[SessionState]:
    """What `input` itself records; `decide_session` then decides what follows from it, once for
    the whole session (a turn's answer records on its turn and decides nothing here)."""
    match input:
        case Fact() | Tick():
            return Decision((), state)  # the fact is folded in: what follows is all
        case Published(keys=keys, refused=refused):
            sent = outbound.record(state, keys, config, ctx)
            sent += outbound.refused(state, dict(refused), config, ctx)
            return Decision(tuple(sent), fold(state, sent))
        case ProviderDone(turn_id=turn_id, outcome=result):
            return record_on_turn(
                state, turn_id, config, lambda s, c: record_provider_result(s, result, c, ctx)
            )
        case ToolCallReady(turn_id=turn_id, call=call, first_byte_at=at):
            return record_on_turn(
                state,
                turn_id,
                config,
                lambda s, c: record_tool_call_ready(s, call, at, c, ctx),
            )
        case ToolHooksSaid(turn_id=turn_id, verdicts=verdicts):
            said = list(verdicts)
            return record_on_turn(
                state, turn_id, config, lambda s, c: record_hook_verdicts(s, said, c, ctx)
            )
        case StageHooksSaid(turn_id=turn_id, verdict=stage_verdict):
            return record_on_turn(
                state,
                turn_id,
                config,
                lambda s, c: record_stage_hooks(s, stage_verdict, c, ctx),
            )
        case WorkflowHookSaid():
            return _workflow_hook_said(state, input, config, ctx)
        case ContextGathered(turn_id=turn_id, results=results):
            return record_on_turn(
                state, turn_id, config, lambda s, c: record_context(s, results, c, ctx)
            )
        case StorageRefused(reason=reason):
            return _storage_refused(state, reason, config, ctx)
        case _:
            assert_never(input)


def _storage_refused(
    state: SessionState, reason: str, config: TurnConfig, ctx: Context
) -> Decision[SessionState]:
    """Each turn live in `state` ended failed (`storage_full`), one after the other (what
    follows the ends, a workflow's stage failing or the next queued input starting, is
    decided after them all)."""
    recorded: Decision[SessionState] = Decision((), state)
    for view, _ in turn_views(state, config):
        assert view.active is not None
        ended = record_on_turn(
            recorded.state,
            view.active.turn_id,
            config,
            lambda s, _c: record_storage_refused(s, reason, ctx),
        )
        recorded = ended.after(recorded)
    return recorded


def _workflow_hook_said(
    state: SessionState, said: WorkflowHookSaid, config: TurnConfig, ctx: Context
) -> Decision[SessionState]:
    """A workflow hook's word, read as its point's: a gate's outcome, an assert's verdict."""
    execution, hook, reason = said.execution_id, said.hook, said.reason
    if said.point == GATE:
        outcome = gate_outcome(said.verdict)
        return record_gate(state, execution, outcome, ctx, gate=hook, reason=reason)
    verdict = assert_verdict(said.verdict)
    return record_assert(state, execution, verdict, ctx, asserter=hook, reason=reason)


def effects_of(state: SessionState, config: TurnConfig, now: datetime) -> tuple[Effect, ...]:
    """What `state` asks the shell to do (the same state always asks the same)."""
    views = turn_views(state, config)
    live = frozenset(view.active.turn_id for view, _ in views if view.active is not None)
    calls = tuple(compose_request(v, c) for v, c in views if needs_provider_call(v))
    effects: list[Effect] = [Providers(live, calls)]
    hook = _awaiting_hook(state, views, config, now)
    if hook is not None:
        effects.append(hook)
    if live:
        effects.append(TimeTurns(live))
    wakes = [t for t in (next_wakeup(state, now), subturns.next_deadline(state)) if t]
    if wakes:
        effects.append(WakeAt(min(wakes)))
    messages = outbound.wanted(state, config)
    if messages:
        effects.append(Deliver(tuple(messages)))
    return tuple(effects)


def _awaiting_hook(
    state: SessionState,
    views: list[tuple[ChatState, TurnConfig]],
    config: TurnConfig,
    now: datetime,
) -> HookEffect | None:
    """The first hook one of the session's turns (or its workflow) waits for."""
    for view, view_config in views:
        assert view.active is not None
        turn_id = view.active.turn_id
        if calls := awaiting_hooks(view, view_config):
            return RunToolHooks(turn_id, tuple(calls))
        if point := awaiting_stage_hooks(view, view_config):
            return RunStageHooks(turn_id, point, hook_subject(view, view_config, point))
        if request := awaiting_context(view, view_config):
            return GatherContext(turn_id, request)
    for workflow_point, execution in awaiting_workflow_hooks(state, config, now):
        return RunWorkflowHook(workflow_point, execution)
    return None
