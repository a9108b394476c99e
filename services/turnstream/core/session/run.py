"""A session with a workflow attached: the stage lifecycle as a pure fold and decider.

    WorkflowAttached ──(no chat turn active)──► the first step
    each step: one stage, or a parallel group whose siblings all run at once
      Setup     upstream checked against inputsSchema, body rendered
                ─► StageEntered + the stage's own turn (turnId = stage execution id)
                   | StageInitFailed
      CheckGate StageCheckGateResult: pass | defer | block (→ resolutionPolicy)
      Act       the turn loop in the stage's lane, bounded by turnCap, until the
                completion channel accepts a result (StageCompletionChecked)
      Assert    StageAssertOutcome: ok | retry (Act again, same transcript) | fail
      Exit      StageExited{result} ─► TurnEnded ─► SessionTurnEnd
    a sibling that fails cancels the others (StageCancelled, no Exit); the join runs only
    when every sibling succeeded; a failed stage with an `onFail` branch runs it
    ─► WorkflowExit{completed | failed | cancelled}

`follow_session` here and `evolve`/`fold` in `fold.py` are the session-level ones
(`turnstream.core.session` exports them): without a workflow they are exactly the turn's.
The events of each lifecycle step are built in `build.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import partial
from typing import Literal, Protocol

from turnstream.core.events import (
    Event,
    FollowUpQueued,
    FollowUpQueuedData,
)
from turnstream.core.fold import Decision, until_quiet
from turnstream.core.immutable import with_changes
from turnstream.core.session import outbound, subturns
from turnstream.core.session.fold import SESSION_KINDS, fold
from turnstream.core.session.run_steps import after_executions, enter_step
from turnstream.core.session.state import SessionState
from turnstream.core.turn.builder import Builder
from turnstream.core.turn.decide import next_step
from turnstream.core.turn.evolve import fold as fold_chat
from turnstream.core.turn.state import ChatState, Context, StageSpec, TurnConfig
from turnstream.core.workflow.build import (
    assert_events,
    cancel,
    end_lane,
    enter,
    exit_events,
    exit_run,
    gate_events,
    lane_builder,
    lane_start,
    pseudo_turn,
    result_of,
    stage_of,
)
from turnstream.core.workflow.definition import ASSERT, GATE
from turnstream.core.workflow.state import StageRun, WorkflowRun


def follow_session(state: SessionState, config: TurnConfig, ctx: Context) -> Decision[SessionState]:
    """Every event that follows from `state` without an outside effect, in order."""
    run = state.workflow
    if run is None or not run.open:
        return decide_chat(state, config, ctx)
    out: Sequence[Event] = ()
    if state.chat.active is not None:
        # a chat turn finishes before the run starts (inputs wait for the run)
        chat = decide_chat(state, with_changes(config, hold_inputs=True), ctx)
        out, state = chat.events, chat.state
    step = partial(_next_step, config=config, ctx=ctx)
    return until_quiet(state, step, fold, out)


def decide_chat(state: SessionState, config: TurnConfig, ctx: Context) -> Decision[SessionState]:
    """What the session's own chat decides: a rejection whose reply would pass the hop
    limit is dropped (`outbound`), then its turn and its sub-turns decide (`chat_steps`)."""
    dropped = outbound.rejections_dropped(state, config, ctx)
    if dropped:
        state = fold(state, dropped)
    return chat_steps(state, config, ctx).after(dropped)


def chat_steps(state: SessionState, config: TurnConfig, ctx: Context) -> Decision[SessionState]:
    """Every event the session's chat decides, in order: at each step a sub-turn's end or
    result first (`subturns`), then its turn's next step, a `spawn` judged against the
    turn's children (`subturns.spawned_by`).

    While the session has nothing of its own in the steps (no run, no sub-turns, no stage
    spend to count) they are the chat's alone: decided and folded on the chat, and the
    session rebuilt once, or at a step with an event of its own (`SESSION_KINDS`: a
    turn's end, a spawn, a call's mode), which it folds, and so on: the same events and
    state as `until_quiet` of `_chat_step` with the session's fold, with one copy of the
    session instead of one per step."""
    events: list[Event] = []
    while (
        state.workflow is None and not state.children and not (config.budget and state.stage_spent)
    ):
        chat = state.chat
        while (step := next_step(chat, config, ctx)) and not _of_session(step):
            events += step
            chat = fold_chat(chat, step)
        if chat is not state.chat:
            state = with_changes(state, chat=chat)
        if not step:
            return Decision(tuple(events), state)
        events += step
        state = fold(state, step)
    return until_quiet(state, partial(_chat_step, config=config, ctx=ctx), fold, events)


def _of_session(step: Sequence[Event]) -> bool:
    """A step with an event the session folds into more than its chat."""
    return any(type(event) in SESSION_KINDS for event in step)


def _chat_step(state: SessionState, config: TurnConfig, ctx: Context) -> Sequence[Event]:
    return subturns.step(state, ctx) or next_step(
        state.chat, _counting_stages(state, config), ctx, subturns.spawned_by(state)
    )


def _counting_stages(state: SessionState, config: TurnConfig) -> TurnConfig:
    """A session budget counts what its workflow stages spent too."""
    if config.budget and state.stage_spent:
        return with_changes(config, session_spent=state.spent)
    return config


def chat_config(state: SessionState, config: TurnConfig) -> TurnConfig:
    """The configuration of the session's own chat turn: while a run is open, a new input
    waits for it (`TurnConfig.hold_inputs`)."""
    run = state.workflow
    config = _counting_stages(state, config)
    return with_changes(config, hold_inputs=True) if run is not None and run.open else config


def lane_config(
    config: TurnConfig, run: WorkflowRun, ex: StageRun, state: SessionState
) -> TurnConfig:
    """The turn configuration of one stage execution: its prompt, envelope and bound, and
    its budget (the stage's own limits over the session's; the session's spend counted)."""
    stage = stage_of(run, ex)
    if stage.budget is not None:
        config = with_changes(config, budget=with_changes(config.budget, **stage.budget))
    if config.budget:
        config = with_changes(config, session_spent=state.spent)
    spec = StageSpec(
        run_id=run.run_id,
        stage_id=stage.id,
        execution_id=ex.execution_id,
        allowed_tools=stage.allowed_tools,
        completion_tool=stage.completion_tool,
        completion_schema=stage.completion_schema,
        turn_cap=stage.turn_cap,
        act=ex.act,
    )
    return with_changes(config, stage=spec, system_prompt=ex.system, stage_hooks=frozenset())


def turn_views(state: SessionState, config: TurnConfig) -> list[tuple[ChatState, TurnConfig]]:
    """Each live turn of the session with its configuration: the chat turn, stage turns."""
    chat = state.chat
    views: list[tuple[ChatState, TurnConfig]] = [] if chat.active is None else [(chat, config)]
    run = state.workflow
    if run is not None:
        for ex in run.executions:
            if ex.status == "act" and ex.lane.active is not None:
                views.append((ex.lane, lane_config(config, run, ex, state)))
    return views


class TurnRecord(Protocol):
    """What an answer to a turn (a provider result, hook verdicts, …) records on a chat: the
    session's own, or a stage's lane (None: nothing; `turnstream.core.turn.answers`'
    `record_*`). What follows is the session's to decide, once (`follow_session`)."""

    def __call__(self, state: ChatState, config: TurnConfig, /) -> Decision[ChatState] | None: ...


def record_on_turn(
    state: SessionState, turn_id: str, config: TurnConfig, record: TurnRecord
) -> Decision[SessionState]:
    """What an answer to the turn `turn_id` (the chat's or a stage's) records, folded into
    the session; nothing follows here (the session's decider decides that once)."""
    run = state.workflow
    ex = run.lane_of(turn_id) if run is not None else None
    if ex is None or run is None:
        if state.chat.active is None or state.chat.active.turn_id != turn_id:
            return Decision((), state)
        recorded = record(state.chat, chat_config(state, config))
        if recorded is None:
            return Decision((), state)
        # `recorded` folded its events into the chat already, and the session's fold has
        # nothing of its own in them (provider, stage, hook, context and tool-call events)
        return Decision(recorded.events, with_changes(state, chat=recorded.state))
    if ex.status != "act":
        return Decision((), state)
    recorded = record(ex.lane, lane_config(config, run, ex, state))
    if recorded is None:
        return Decision((), state)
    return Decision(recorded.events, fold(state, recorded.events))


def awaiting_workflow_hooks(
    state: SessionState, config: TurnConfig, now: datetime
) -> list[tuple[str, StageRun]]:
    """Gates and asserts the shell must run now (only when such hooks exist)."""
    run = state.workflow
    if run is None or not run.open or run.interrupt == "hard":
        return []
    now_waiting: list[tuple[str, StageRun]] = []
    for ex in run.executions:
        if not ex.running or (ex.wait_until is not None and now < ex.wait_until):
            continue
        if ex.status == "gate" and GATE in config.workflow_hooks:
            now_waiting.append((GATE, ex))
        acted = ex.status == "act" and ex.lane.active is not None and ex.act.done
        if acted and ASSERT in config.workflow_hooks:
            now_waiting.append((ASSERT, ex))
    return now_waiting


def next_wakeup(state: SessionState, now: datetime) -> datetime | None:
    """When the next deferred gate or retry backoff ends (the shell sets a timer)."""
    run = state.workflow
    if run is None or not run.open:
        return None
    times = [
        ex.wait_until
        for ex in run.executions
        if ex.running and ex.wait_until is not None and ex.wait_until > now
    ]
    return min(times) if times else None


def record_gate(
    state: SessionState,
    execution_id: str,
    outcome: Literal["pass", "defer", "block"],
    ctx: Context,
    *,
    gate: str | None = None,
    reason: str | None = None,
) -> Decision[SessionState]:
    """Record a gate's answer (`resolutionPolicy` says what defer and block do); what
    follows is the session's decider's."""
    run = state.workflow
    ex = run.lane_of(execution_id) if run is not None else None
    if run is None or ex is None or ex.status != "gate":
        return Decision((), state)
    events = gate_events(run, ex, outcome, ctx, gate=gate, reason=reason)
    return Decision(tuple(events), fold(state, events))


def record_assert(
    state: SessionState,
    execution_id: str,
    verdict: Literal["ok", "retry", "fail"],
    ctx: Context,
    *,
    asserter: str | None = None,
    reason: str | None = None,
) -> Decision[SessionState]:
    """Record an assert hook's verdict (Act again, or Exit); what follows is the session's
    decider's."""
    run = state.workflow
    ex = run.lane_of(execution_id) if run is not None else None
    if run is None or ex is None or ex.status != "act":
        return Decision((), state)
    if ex.lane.active is None or not ex.act.done:
        return Decision((), state)
    events = assert_events(run, ex, verdict, reason, ctx, asserter=asserter)
    return Decision(tuple(events), fold(state, events))


def _next_step(state: SessionState, config: TurnConfig, ctx: Context) -> Sequence[Event]:
    run = state.workflow
    assert run is not None
    if not run.open:
        return decide_chat(state, config, ctx).events if state.chat.active is None else ()
    parked = _park_inputs(state, run, ctx)
    if parked:
        return parked
    if run.status == "attached":
        if state.chat.active is not None:
            return []
        return enter_step(state, run, 0, (), ctx)
    repaired = _repair(state, run, ctx)
    if repaired:
        return repaired
    if run.interrupt == "hard":
        running = [ex for ex in run.executions if ex.running]
        if running:
            return cancel(run, running, "interrupted", "hard interrupt", ctx)
        return [exit_run(state.session_id, run, "cancelled", "interrupted", "hard interrupt", ctx)]
    for ex in run.executions:
        if ex.running:
            events = _advance(state, run, ex, config, ctx)
            if events:
                return events
    return after_executions(state, run, ctx)


def _park_inputs(state: SessionState, run: WorkflowRun, ctx: Context) -> list[Event]:
    """Messages that arrive while the run goes on wait for it (FollowUpQueued)."""
    if state.chat.active is not None:
        return []
    events: list[Event] = []
    for p in state.chat.pending:
        if p.queued:
            continue
        b = Builder(state.session_id, pseudo_turn(run, p.turn_id, p.input_id), ctx)
        data = FollowUpQueuedData(input_id=p.input_id, behind_turn_id=run.run_id)
        events.append(b.make(FollowUpQueued, data))
    return events


def _advance(
    state: SessionState, run: WorkflowRun, ex: StageRun, config: TurnConfig, ctx: Context
) -> Sequence[Event]:
    if ex.wait_until is not None and ctx.now < ex.wait_until:
        return []
    if ex.status == "gate":
        if GATE in config.workflow_hooks:
            return []  # the shell asks the gate, then `record_gate`
        return gate_events(run, ex, "pass", ctx)
    turn = ex.lane.active
    if turn is None:  # the stage's turn ended on its own: a provider error, a bound
        reason = f"the stage turn failed: {ex.failure or 'it ended'}"
        return exit_events(run, ex, result_of(ex, "fail", reason), ctx, run.last_event_id)
    if turn.end is not None:
        return next_step(ex.lane, lane_config(config, run, ex, state), ctx)
    if ex.asserted is not None:  # Assert is recorded, its Exit was not (a crash between)
        result = result_of(ex, ex.asserted, ex.assert_reason)
        return exit_events(run, ex, result, ctx, turn.last_event_id)
    if ex.act.done:
        if run.interrupt is not None and ex.parsed is None:  # summarised and stopped
            return cancel(run, [ex], "interrupted", "graceful interrupt", ctx)
        if ASSERT in config.workflow_hooks:
            return []  # the shell asks the assert hook, then `record_assert`
        if ex.parsed is not None and not ex.cap_hit:
            return assert_events(run, ex, "ok", None, ctx)
        stage = stage_of(run, ex)
        reason = f"turnCap={stage.turn_cap} rounds passed without a valid {stage.completion_tool}"
        return assert_events(run, ex, "fail", reason, ctx)
    # one step of the stage's turn: where its Act stands is the stage's (`StageRun.act`),
    # which the session's fold moves on and `lane_config` hands the next step
    return next_step(ex.lane, lane_config(config, run, ex, state), ctx)


def _repair(state: SessionState, run: WorkflowRun, ctx: Context) -> list[Event]:
    """Finish what a decision cut short began: a prefix of it is in the log (a crash while
    it was appended, or an event the log refused)."""
    for ex in run.executions:
        turn = ex.lane.active
        if not ex.running and turn is not None:  # exited or cancelled, its turn still open
            return end_lane(lane_builder(run, ex, ctx), ex, ex.result)
        if ex.running and turn is None and ex.lane.turns_ended == 0:  # its turn never started
            return lane_start(lane_builder(run, ex, ctx), run, ex.stage_id, ex.execution_id)
    if run.step < 0 or run.interrupt is not None:
        return []
    step, current = run.step_def(), run.current()
    if not step.parallel or any(ex.role != "stage" or not ex.running for ex in current):
        return []
    entered = {ex.stage_id for ex in current}
    events: list[Event] = []
    for stage_id in step.stages:  # a sibling whose entry was lost
        if stage_id not in entered:
            events += enter(state.session_id, run, stage_id, run.step, (), ctx)
    return events


__all__ = [
    "ASSERT",
    "GATE",
    "awaiting_workflow_hooks",
    "follow_session",
    "lane_config",
    "next_wakeup",
    "record_assert",
    "record_gate",
    "record_on_turn",
    "turn_views",
]
