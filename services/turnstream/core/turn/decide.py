"""`decide_turn`: every event that follows from a chat's state, until it must wait.

    InputAccepted ──► pending ──(no active turn)──► SessionTurnStart
      RECEIVE_INPUT ─► COMPOSE_REQUEST ─► SEND_REQUEST ─► ProviderRequestStarted
                                                   │ the shell calls the provider,
                                                   ▼ then `on_provider_result`
      STREAM_RESPONSE ─┬─ tool calls ─► TOOL_CALL: ToolInvocationProposed per call
                       │                  judged at once (`approvals`): the mode's verdict;
                       │                  one that needs a person waits for the approval
                       │                  service's ToolCallApproved / Denied
                       │                  (tool hooks: the shell runs them, `on_hook_verdicts`)
                       │                  ToolInvocationRequested: read-only calls together,
                       │                  a mutating call alone and in order
                       │                  wait for Succeeded / Failed (tool-executor)
                       │                  ─► COMPOSE_REQUEST with the results (bounded)
                       ├─ stop = max_tokens, continuation left ─► COMPOSE_REQUEST (bounded)
                       └─ otherwise ─► RENDER ─► TurnEnded{completed} ─► SessionTurnEnd
      any failure or bound ─► TurnEnded{failed, class, reason, nextAction} ─► SessionTurnEnd
    InputAccepted while a turn is active ─► FollowUpQueued (message) | SteeringInjected (steer)

A turn's position is its phase (`turnstream.core.turn.phases`), folded from its events, so
`decide_turn` continues a turn from wherever the log left it: `next_step` asks what ends the
turn whatever its phase (`_ending`), then matches the phase to the end (`_in_phase`); a step
that closes a stage goes on in the same step with what follows it (`onward`), so the stage
left and the next entered are one event, made once and folded once. Pure:
the clock and the id factory come in `Context`. The shell's answers (`on_*` above) are
recorded in `answers`; `next_step` is one step, which the session's chat takes after its
sub-turns' (`turnstream.core.session.run.chat_steps`) and a stage's turn with its stage.
"""

from __future__ import annotations

from functools import partial
from typing import assert_never

from turnstream.core.events import (
    Event,
    FailureClass,
    FollowUpQueued,
    FollowUpQueuedData,
    MessageDropped,
    MessageDroppedData,
    SessionTurnEnd,
    SessionTurnEndData,
    SessionTurnStart,
    SessionTurnStartData,
    Stage,
    SteeringInjected,
    SteeringInjectedData,
)
from turnstream.core.fold import Decision, until_quiet
from turnstream.core.turn import runtime_calls
from turnstream.core.turn.builder import Builder
from turnstream.core.turn.context import (
    awaiting_context,
)
from turnstream.core.turn.evolve import fold
from turnstream.core.turn.evolve_inputs import INTERRUPT_INPUT
from turnstream.core.turn.interceptors import CLOSES, hook_point, proceed
from turnstream.core.turn.onward import leave, onward, over_budget_end
from turnstream.core.turn.phases import (
    AwaitingModel,
    CallingTools,
    Composing,
    Ended,
    ModelFailed,
    Receiving,
    Rendering,
    Requesting,
    Responded,
)
from turnstream.core.turn.runtime_calls import NONE_SPAWNED, Spawned
from turnstream.core.turn.state import (
    ActiveTurn,
    ChatState,
    Context,
    PendingInput,
    TurnConfig,
)
from turnstream.core.turn.tool_call import (
    approvals,
    executable,
    requested,
    tool_step,
)

SUMMARY_REQUEST = (
    "The user interrupted this turn. Do not call any more tools: summarise what you have "
    "done and found so far, and say what is left."
)


def decide_turn(state: ChatState, config: TurnConfig, ctx: Context) -> Decision[ChatState]:
    """Every event that follows from `state` without an outside effect, in order (a chat
    with no sub-turns: the session's own chat decides with its children,
    `turnstream.core.session.run`; a stage's turn, step by step with its stage)."""
    assert config.stage is None, "a stage's Act is its stage's: the session decides its turn"
    return until_quiet(state, partial(next_step, config=config, ctx=ctx), fold)


def needs_provider_call(state: ChatState) -> bool:
    """True when the active turn waits for a provider response the shell must fetch."""
    return state.active is not None and state.active.awaiting_provider


def next_step(
    state: ChatState, config: TurnConfig, ctx: Context, spawned: Spawned = NONE_SPAWNED
) -> list[Event]:
    """The chat's next events (none: it waits); a `spawn` is judged against `spawned`."""
    turn = state.active
    if turn is None:
        if config.hold_inputs:
            return []  # a workflow attached or running goes first: inputs wait for it
        return _start_turn(state, ctx)
    waiting = [p for p in state.pending if not p.queued]
    if waiting:
        return [_park(state.session_id, turn, p, config, ctx) for p in waiting]
    b = Builder(state.session_id, turn, ctx)
    stopped = _ending(b, turn, config)
    if stopped is not None:
        return stopped
    if config.stage is not None and config.stage.act.done:
        return []  # the stage's Act is over: the workflow asserts and exits it
    if type(turn.phase) is AwaitingModel:
        # calls proposed while the model streams may run before the response ends
        verdicts = approvals(b, turn, config)
        if verdicts:
            return verdicts
        ready = executable(turn.calls) if not config.tool_hooks else []
        return [requested(b, call, config, call.args) for call in ready]
    point = hook_point(state, config)
    if point is not None:
        if point in config.stage_hooks:
            return []  # the shell runs the hooks there first, then `on_stage_hooks`
        closes = CLOSES.get(point)
        if closes is not None:
            return leave(b, closes, state, config)
        return proceed(point, b, state, config)
    return _in_phase(b, state, turn, config, spawned)


def _ending(b: Builder, turn: ActiveTurn, config: TurnConfig) -> list[Event] | None:
    """What ends (or has ended) the turn whatever its stage: its end recorded, a hook's
    stop, an interrupt, its wall-time bound; None when nothing does."""
    phase = turn.phase
    if type(phase) is Ended:
        if turn.reply_to is not None and not phase.reply_settled:
            # the reply goes first (the shell delivers it, `outbound.record` says so), or is
            # dropped past the hop limit; the turn closes after
            return _reply_dropped(b, turn, config)
        return [b.make(SessionTurnEnd, SessionTurnEndData(status=phase.status))]
    if turn.abort is not None:
        hard = turn.abort.action == "hard_abort"
        failure = FailureClass.INTERRUPTED if hard else FailureClass.POLICY_DENIED
        return b.fail(
            failure,
            turn.abort.reason,
            "the turn was stopped by a hook; send a new "
            "message to continue (tool calls before the stop may have completed)",
        )
    if turn.interrupt is not None:
        if turn.interrupt.mode == "hard":
            return b.fail(
                FailureClass.INTERRUPTED,
                f"hard interrupt from {turn.interrupt.sender}",
                "the turn was stopped at once; tool calls already running were cancelled and "
                "may have had effects; send a new message to continue",
            )
        if not turn.summary_asked:
            steer = SteeringInjectedData(
                input_id=f"{INTERRUPT_INPUT}{turn.turn_id}", text=SUMMARY_REQUEST
            )
            return [b.make(SteeringInjected, steer)]
    if turn.started_at is not None:
        elapsed = (b.ctx.now - turn.started_at).total_seconds()
        if elapsed > config.max_turn_seconds:
            return b.fail(
                FailureClass.TIMEOUT,
                f"the turn ran {elapsed:.0f} s, past its wall-time bound of "
                f"{config.max_turn_seconds:.0f} s",
                "tool calls of this turn may have completed; send a follow-up to continue, "
                "or raise TURNSTREAM_MAX_TURN_SECONDS",
            )
    return None


def _model_failed(b: Builder, failed: ModelFailed) -> list[Event]:
    """The model call failed for good (no compaction helps, or one was vetoed)."""
    if failed.veto is not None:
        return b.fail(
            FailureClass.PROVIDER_ERROR,
            f"the request is too long for the model and compaction was vetoed ({failed.veto})",
            "start a new session, or change the compaction hook",
        )
    return b.fail(
        FailureClass.PROVIDER_ERROR,
        f"the model provider failed ({failed.error})",
        "send the message again; if it keeps failing, check the provider's status "
        "and TURNSTREAM_PROVIDER / TURNSTREAM_BASE_URL",
    )


def _in_phase(
    b: Builder, state: ChatState, turn: ActiveTurn, config: TurnConfig, spawned: Spawned
) -> list[Event]:
    """The step of the phase the turn is in (past its hook points: `hook_point`). A step
    that closes a stage goes on at once (`onward.leave`); a closed phase goes on as that
    step would have."""
    match turn.phase:
        case Composing(open=True):
            if awaiting_context(state, config) is not None:
                return []  # the shell asks the context providers, then `on_context`
            return leave(b, Stage.COMPOSE_REQUEST, state, config)
        case CallingTools(open=True):
            refused = runtime_calls.refuse(b, state, turn, config, spawned)
            if refused:
                return refused
            step = tool_step(b, turn, config)
            return leave(b, Stage.TOOL_CALL, state, config) if step is None else step
        case Rendering(open=True):
            return leave(b, Stage.RENDER, state, config)  # rendered (`hook_point` renders first)
        case (
            Receiving(open=False)
            | Composing()
            | Responded(open=False)
            | CallingTools()
            | Rendering()
        ):
            return onward(b, turn.phase.stage, state, config)
        case ModelFailed(open=False) as failed:
            return _model_failed(b, failed)
        case Receiving() | Requesting() | Responded() | ModelFailed():
            # SEND_REQUEST closed without a result or STREAM_RESPONSE left open: the
            # response was lost (a crash between batches). Ask the provider again.
            return over_budget_end(b, state, config) or [b.pre(Stage.SEND_REQUEST)]
        case AwaitingModel() | Ended():
            return []  # the model's answer, or the turn's close, is decided before
        case _:
            assert_never(turn.phase)


def _start_turn(state: ChatState, ctx: Context) -> list[Event]:
    if not state.pending:
        return []
    nxt = state.pending[0]
    turn = ActiveTurn(
        turn_id=nxt.turn_id,
        input_id=nxt.input_id,
        chat_id=nxt.chat_id,
        trace_id=nxt.trace_id,
        correlation_id=nxt.correlation_id,
        reply_to=nxt.reply_to,
        last_event_id=nxt.input_id,
    )
    b = Builder(state.session_id, turn, ctx)
    data = SessionTurnStartData(input_id=nxt.input_id, text=nxt.text, sender=nxt.sender)
    return [b.make(SessionTurnStart, data), b.pre(Stage.RECEIVE_INPUT)]


def _park(
    session_id: str, turn: ActiveTurn, pending: PendingInput, config: TurnConfig, ctx: Context
) -> Event:
    """An input that arrived during a turn: steer it in, or queue it for the next turn."""
    b = Builder(
        session_id,
        ActiveTurn(
            turn_id=pending.turn_id,
            input_id=pending.input_id,
            chat_id=pending.chat_id,
            trace_id=pending.trace_id,
            correlation_id=pending.correlation_id,
            reply_to=pending.reply_to,
            last_event_id=pending.input_id,
        ),
        ctx,
    )
    # a message that wants a reply gets a turn of its own (its reply is that turn's)
    if pending.kind == "steer" or (config.followup_policy == "steer" and pending.reply_to is None):
        steer = SteeringInjectedData(input_id=pending.input_id, text=pending.text)
        return b.make(SteeringInjected, steer, turn_id=turn.turn_id)
    queued = FollowUpQueuedData(input_id=pending.input_id, behind_turn_id=turn.turn_id)
    return b.make(FollowUpQueued, queued)


def _reply_dropped(b: Builder, turn: ActiveTurn, config: TurnConfig) -> list[Event]:
    """A reply past the hop limit is not sent; nothing else is decided for it here."""
    settled = turn.end is not None and turn.end.reply_settled
    if turn.reply_to is None or settled or turn.hops + 1 <= config.max_hops:
        return []
    data = MessageDroppedData(
        to=turn.reply_to, reason="hop_limit", hops=turn.hops + 1, cause="replyTo"
    )
    return [b.make(MessageDropped, data)]
