"""`decide`: every event that follows from a session's state, until it must wait.

    InputAccepted ──► pending ──(no active turn)──► SessionTurnStart
      RECEIVE_INPUT ─► COMPOSE_REQUEST ─► SEND_REQUEST ─► ProviderRequestStarted
                                                   │ the shell calls the provider,
                                                   ▼ then `on_provider_result`
      STREAM_RESPONSE ─┬─ tool calls ─► TOOL_CALL: ToolInvocationProposed per call
                       │                  wait for ToolCallApproved / Denied (approval service)
                       │                  (tool hooks: the shell runs them, `on_hook_verdicts`)
                       │                  ToolInvocationRequested: read-only calls together,
                       │                  a mutating call alone and in order
                       │                  wait for Succeeded / Failed (tool-executor)
                       │                  ─► COMPOSE_REQUEST with the results (bounded)
                       ├─ stop = max_tokens, continuation left ─► COMPOSE_REQUEST (bounded)
                       └─ otherwise ─► RENDER ─► TurnEnded{completed} ─► SessionTurnEnd
      any failure or bound ─► TurnEnded{failed, class, reason, nextAction} ─► SessionTurnEnd
    InputAccepted while a turn is active ─► FollowUpQueued (message) | SteeringInjected (steer)

A turn's position is derived from its last stage event, so `decide` continues a turn
from wherever the log left it. Pure: the clock and the id factory come in `Context`.
"""

from __future__ import annotations

from datetime import datetime
from functools import partial
from typing import Any, assert_never

from turnstream.core.events import (
    AssistantMessage,
    ContentBlock,
    ContextCompacted,
    ContextCompactedData,
    Event,
    FailureClass,
    FollowUpQueued,
    FollowUpQueuedData,
    HookDecided,
    HookDecidedData,
    ProviderRequestCompleted,
    ProviderRequestCompletedData,
    ProviderRequestFailed,
    ProviderRequestFailedData,
    ProviderRequestStarted,
    ProviderRequestStartedData,
    RenderEmitted,
    RenderEmittedData,
    SessionTurnEnd,
    SessionTurnEndData,
    SessionTurnStart,
    SessionTurnStartData,
    Stage,
    StageCompletionChecked,
    StageCompletionCheckedData,
    SteeringInjected,
    SteeringInjectedData,
    TextBlock,
    ToolUseBlock,
)
from turnstream.core.fold import until_quiet
from turnstream.core.turn import outbound, subturns
from turnstream.core.turn.agent import is_runtime_tool
from turnstream.core.turn.builder import Builder
from turnstream.core.turn.completion import check_response, completion_tool
from turnstream.core.turn.context import (
    ContextResult,
    awaiting_context,
    context_events,
    with_context,
)
from turnstream.core.turn.evolve import INTERRUPT_INPUT, fold
from turnstream.core.turn.fallback import attempt_events
from turnstream.core.turn.manifest import tools_digest
from turnstream.core.turn.provider import (
    ProviderFailure,
    ProviderOutcome,
    ProviderRequest,
    ProviderSuccess,
)
from turnstream.core.turn.state import (
    ActiveTurn,
    Context,
    Decision,
    HookVerdict,
    Message,
    PendingInput,
    SessionState,
    StageHookVerdict,
    ToolCall,
    TurnConfig,
)
from turnstream.core.turn.tool_call import (
    executable,
    propose_calls,
    requested,
    tool_step,
)

SUMMARY_REQUEST = (
    "The user interrupted this turn. Do not call any more tools: summarise what you have "
    "done and found so far, and say what is left."
)


def decide(state: SessionState, config: TurnConfig, ctx: Context) -> Decision:
    """Every event that follows from `state` without an outside effect, in order."""
    return Decision(*until_quiet(state, partial(_next_step, config=config, ctx=ctx), fold))


def needs_provider_call(state: SessionState) -> bool:
    """True when the active turn waits for a provider response the shell must fetch."""
    return state.active is not None and state.active.awaiting_provider


def awaiting_stage_hooks(state: SessionState, config: TurnConfig) -> Stage | None:
    """The stage whose guard/transform hooks must run before the turn goes on, if any."""
    turn = state.active
    if turn is None or turn.ended or turn.abort or not turn.stage_open:
        return None
    if turn.stage not in config.stage_hooks:
        return None
    if turn.stage is Stage.RENDER and turn.rendered:
        return None
    if turn.stage not in (Stage.RECEIVE_INPUT, Stage.RENDER):
        return None
    return turn.stage


def stage_hook_text(state: SessionState) -> str:
    """The text the stage hooks see: the input at RECEIVE_INPUT, the reply at RENDER."""
    turn = state.active
    assert turn is not None
    if turn.stage is Stage.RENDER:
        return turn.reply
    last = next((m for m in reversed(state.history) if m.role == "user"), None)
    return last.text if last else ""


def on_stage_hooks(
    state: SessionState, verdict: StageHookVerdict, config: TurnConfig, ctx: Context
) -> Decision:
    """Record what the stage hooks decided, take the stage on, go on."""
    turn = state.active
    if turn is None or awaiting_stage_hooks(state, config) is not verdict.stage:
        return Decision([], state)
    b = Builder(state.session_id, turn, ctx)
    events: list[Event] = []
    if verdict.action != "continue":
        text = verdict.text if verdict.action == "modify" else None
        events.append(_hook_decided(b, verdict.stage, verdict, text=text))
    if verdict.action in ("continue", "modify"):
        text = verdict.text if verdict.action == "modify" and verdict.text is not None else None
        if verdict.stage is Stage.RENDER:
            events.append(_render(b, turn, text if text is not None else turn.reply))
        else:
            events.append(b.post(Stage.RECEIVE_INPUT, "ok"))
    return decide(fold(state, events), config, ctx).after(events)


def compose_request(state: SessionState, config: TurnConfig) -> ProviderRequest:
    """The provider request for the active turn, built from the session history."""
    turn = state.active
    assert turn is not None, "compose_request needs an active turn"
    tools = config.tools if config.offer_tools and turn.interrupt is None else ()
    spec = config.stage
    if spec is not None and turn.interrupt is None:
        allowed = [t for t in config.tools if t.name in spec.allowed_tools]
        tools = (*allowed, completion_tool(spec))
    return ProviderRequest(
        session_id=state.session_id,
        turn_id=turn.turn_id,
        iteration=turn.iteration,
        call_index=state.provider_calls - 1,
        system=with_context(config.system_prompt, turn.context),
        messages=state.history,
        tools=tools,
        stage=spec.stage_id if spec else None,
        trace_id=turn.trace_id,
        agent=config.agent,
        on_fallback=turn.on_fallback,
    )


def on_provider_result(
    state: SessionState, outcome: ProviderOutcome, config: TurnConfig, ctx: Context
) -> Decision:
    """The events that record a provider outcome, then whatever follows from them."""
    turn = state.active
    if turn is None or not turn.awaiting_provider or turn.ended:
        return Decision([], state)  # a late result for a turn that moved on: nothing to record
    b = Builder(state.session_id, turn, ctx)
    events: list[Event] = attempt_events(b, outcome, turn.iteration)
    match outcome:
        case ProviderSuccess():
            if turn.stage is Stage.SEND_REQUEST and turn.stage_open:
                events.append(b.post(Stage.SEND_REQUEST, "ok", outcome.first_byte_at))
            if not (turn.stage is Stage.STREAM_RESPONSE and turn.stage_open):
                events.append(b.pre(Stage.STREAM_RESPONSE, outcome.first_byte_at))
            content: list[ContentBlock] = []
            if outcome.text:
                content.append(TextBlock(text=outcome.text))
            content += [
                ToolUseBlock(id=c.id, name=c.name, input=c.arguments) for c in outcome.tool_calls
            ]
            data = ProviderRequestCompletedData(
                message=AssistantMessage(content=content),
                usage=outcome.usage,
                stop_reason=outcome.stop_reason,
                iteration=turn.iteration,
            )
            events.append(b.make(ProviderRequestCompleted, data, outcome.finished_at))
            events.append(b.post(Stage.STREAM_RESPONSE, "ok", outcome.finished_at))
        case ProviderFailure():
            failed = ProviderRequestFailedData(
                error_class=outcome.error_class,
                message=outcome.message,
                retryable=outcome.retryable,
                status_code=outcome.status_code,
                iteration=turn.iteration,
            )
            events.append(b.make(ProviderRequestFailed, failed, outcome.failed_at))
            if turn.stage_open:
                events.append(b.post(turn.stage, "failed", outcome.failed_at))
        case _:
            assert_never(outcome)
    return decide(fold(state, events), config, ctx).after(events)


def on_context(
    state: SessionState, results: tuple[ContextResult, ...], config: TurnConfig, ctx: Context
) -> Decision:
    """The context providers' answers for the turn's COMPOSE_REQUEST, then what follows."""
    turn = state.active
    if turn is None or awaiting_context(state, config) is None:
        return Decision([], state)  # late, or already recorded (a redelivered answer)
    b = Builder(state.session_id, turn, ctx)
    events = context_events(b, results, turn.iteration)
    events.append(b.post(Stage.COMPOSE_REQUEST, "ok"))
    return decide(fold(state, events), config, ctx).after(events)


def on_tool_call_ready(
    state: SessionState,
    call: ToolCall,
    first_byte_at: datetime,
    config: TurnConfig,
    ctx: Context,
) -> Decision:
    """A tool call whose block is complete while the model still streams: propose it now,
    so approval (and, once approved, the run) starts before the response ends."""
    turn = state.active
    if turn is None or not turn.awaiting_provider or turn.ended or turn.abort:
        return Decision([], state)
    if config.stage is not None:
        return Decision([], state)  # a stage judges the whole response before any call is proposed
    if turn.interrupt is not None or any(c.call_id == call.id for c in turn.calls):
        return Decision([], state)
    if turn.tool_calls_made + 1 > config.max_tool_calls_per_turn:
        return Decision([], state)  # the whole response decides: the bound ends the turn then
    b = Builder(state.session_id, turn, ctx)
    events: list[Event] = []
    if turn.stage is Stage.SEND_REQUEST and turn.stage_open:
        events.append(b.post(Stage.SEND_REQUEST, "ok", first_byte_at))
    if not (turn.stage is Stage.STREAM_RESPONSE and turn.stage_open):
        events.append(b.pre(Stage.STREAM_RESPONSE, first_byte_at))
    events += propose_calls(b, turn, config, [call], len(turn.calls))
    return decide(fold(state, events), config, ctx).after(events)


def on_hook_verdicts(
    state: SessionState, verdicts: list[HookVerdict], config: TurnConfig, ctx: Context
) -> Decision:
    """Record what the tool hooks decided, request the calls they let through, go on."""
    turn = state.active
    if turn is None:
        return Decision([], state)
    b = Builder(state.session_id, turn, ctx)
    events: list[Event] = []
    calls = {c.invocation_id: c for c in turn.calls}
    for verdict in verdicts:
        call = calls.get(verdict.invocation_id)
        if call is None or call.status != "approved":
            continue
        runtime = is_runtime_tool(call.tool)
        if verdict.action != "continue" or runtime:
            # a runtime call's pass is recorded too: the runner runs it, nobody requests it
            args = verdict.args if verdict.action == "modify" else None
            decided = _hook_decided(
                b, Stage.TOOL_CALL, verdict, invocation_id=call.invocation_id, args=args
            )
            events.append(decided)
        if verdict.action in ("abort_turn", "hard_abort"):
            break
        if verdict.action in ("continue", "modify") and not runtime:
            args = verdict.args if verdict.action == "modify" and verdict.args else call.args
            events.append(requested(b, call, config, args))
    return decide(fold(state, events), config, ctx).after(events)


def _hook_decided(
    b: Builder, stage: Stage, verdict: HookVerdict | StageHookVerdict, **changed: Any
) -> Event:
    """The record of a hook decision that changes the turn (`changed`: what it changed)."""
    data = HookDecidedData(
        hook=verdict.hook,
        kind=verdict.kind,
        stage=stage.value,
        point="pre",
        action=verdict.action,
        reason=verdict.reason,
        timed_out=verdict.timed_out,
        **changed,
    )
    return b.make(HookDecided, data)


def _next_step(state: SessionState, config: TurnConfig, ctx: Context) -> list[Event]:
    children = subturns.step(state, ctx) or outbound.rejections_dropped(state, config, ctx)
    if children:
        return children
    turn = state.active
    if turn is None:
        if state.workflow is not None and state.workflow.open:
            return []  # a workflow attached or running goes first: inputs wait for it
        return _start_turn(state, ctx)
    waiting = [p for p in state.pending if not p.queued]
    if waiting:
        return [_park(state.session_id, turn, p, config, ctx) for p in waiting]
    b = Builder(state.session_id, turn, ctx)
    if turn.ended is not None:
        if turn.reply_to is not None and not turn.reply_settled:
            # the reply goes first (the shell delivers it, `outbound.record` says so), or is
            # dropped past the hop limit; the turn closes after
            return outbound.reply_dropped(b, turn, config)
        return [b.make(SessionTurnEnd, SessionTurnEndData(status=turn.ended))]
    if turn.abort is not None:
        action, reason = turn.abort
        failure = FailureClass.INTERRUPTED if action == "hard_abort" else FailureClass.POLICY_DENIED
        return b.fail(
            failure,
            reason,
            "the turn was stopped by a hook; send a new "
            "message to continue (tool calls before the stop may have completed)",
        )
    if turn.interrupt is not None:
        mode, sender, _ = turn.interrupt
        if mode == "hard":
            return b.fail(
                FailureClass.INTERRUPTED,
                f"hard interrupt from {sender}",
                "the turn was stopped at once; tool calls already running were cancelled and "
                "may have had effects; send a new message to continue",
            )
        if not turn.summary_asked:
            steer = SteeringInjectedData(
                input_id=f"{INTERRUPT_INPUT}{turn.turn_id}", text=SUMMARY_REQUEST
            )
            return [b.make(SteeringInjected, steer)]
    if turn.started_at is not None:
        elapsed = (ctx.now - turn.started_at).total_seconds()
        if elapsed > config.max_turn_seconds:
            return b.fail(
                FailureClass.TIMEOUT,
                f"the turn ran {elapsed:.0f} s, past its wall-time bound of "
                f"{config.max_turn_seconds:.0f} s",
                "tool calls of this turn may have completed; send a follow-up to continue, "
                "or raise TURNSTREAM_MAX_TURN_SECONDS",
            )
    if config.stage is not None and turn.act_done:
        return []  # the stage's Act is over: the workflow asserts and exits it
    if turn.awaiting_provider:
        # calls proposed while the model streams may run before the response ends
        ready = executable(turn.calls) if not config.tool_hooks else []
        return [requested(b, call, config, call.args) for call in ready]
    stage, is_open = turn.stage, turn.stage_open
    if turn.provider_error and not is_open:
        if turn.provider_error.startswith("prompt_too_long") and not turn.compacted:
            compacted = _compact(b, state, turn)
            if compacted:
                return compacted
        return b.fail(
            FailureClass.PROVIDER_ERROR,
            f"the model provider failed ({turn.provider_error})",
            "send the message again; if it keeps failing, check the provider's status "
            "and TURNSTREAM_PROVIDER / TURNSTREAM_BASE_URL",
        )
    match stage, is_open:
        case Stage.RECEIVE_INPUT, True:
            if stage in config.stage_hooks:
                return []  # the shell runs the stage hooks, then `on_stage_hooks`
            return [b.post(stage, "ok")]
        case Stage.RECEIVE_INPUT, False:
            return _compose_or_stop(b, turn, config)
        case Stage.COMPOSE_REQUEST, True:
            if awaiting_context(state, config) is not None:
                return []  # the shell asks the context providers, then `on_context`
            return [b.post(stage, "ok")]
        case Stage.COMPOSE_REQUEST, False:
            return [b.pre(Stage.SEND_REQUEST)]
        case Stage.SEND_REQUEST, True:
            provider, model = (config.provider, config.model)
            if turn.on_fallback and config.fallback is not None:
                provider, model = config.fallback
            offered = compose_request(state, config).tools
            data = ProviderRequestStartedData(
                provider=provider,
                model=model,
                iteration=turn.iteration,
                call_index=state.provider_calls,
                message_count=len(state.history),
                tools_digest=tools_digest(offered),
                tools=[t.name for t in offered],
            )
            return [b.make(ProviderRequestStarted, data)]
        case Stage.STREAM_RESPONSE, False:
            if config.stage is not None and turn.checked_round < turn.iteration:
                checked = check_response(config.stage, turn.requested_calls, turn.iteration)
                if checked is not None and turn.interrupt is not None and not checked.parsed:
                    # a graceful interrupt mid-Act: no completion is asked for any more; the
                    # summary round's answer ends the Act
                    if turn.iteration > turn.interrupt[2]:
                        stopped = checked.model_copy(
                            update={"outcome": "interrupted", "call_ids": [], "detail": None}
                        )
                        return [b.make(StageCompletionChecked, stopped)]
                    checked = None
                if checked is not None:
                    return [b.make(StageCompletionChecked, checked)]
            if config.stage is not None and not turn.requested_calls:
                return _compose_or_stop(b, turn, config)
            if turn.requested_calls:
                return [b.pre(Stage.TOOL_CALL)]
            wants_more = turn.stop_reason == "max_tokens"
            if wants_more and turn.completions <= config.max_output_continuations:
                return _compose_or_stop(b, turn, config)
            return [b.pre(Stage.RENDER)]
        case Stage.TOOL_CALL, True:
            refused = outbound.refuse(b, state, turn, config)
            return refused or tool_step(b, turn, config)
        case Stage.TOOL_CALL, False:
            if turn.interrupt is not None and turn.iteration > turn.interrupt[2]:
                return [b.pre(Stage.RENDER)]  # the summary round is done: no more rounds
            return _compose_or_stop(b, turn, config)
        case Stage.RENDER, True:
            if not turn.rendered:
                if stage in config.stage_hooks:
                    return []  # the shell runs the stage hooks, then `on_stage_hooks`
                return [_render(b, turn, turn.reply)]
            return [b.post(stage, "ok")]
        case Stage.RENDER, False:
            return [b.end("completed", reply=turn.reply)]
        case _:
            # SEND_REQUEST closed without a result or STREAM_RESPONSE left open: the
            # response was lost (a crash between batches). Ask the provider again.
            return [b.pre(Stage.SEND_REQUEST)]


def estimate_tokens(messages: tuple[Message, ...]) -> int:
    """A rough token count (4 characters a token): enough to report a compaction."""
    return sum(len(m.text) + 20 * len(m.tool_calls) for m in messages) // 4 + 1


def _compact(b: Builder, state: SessionState, turn: ActiveTurn) -> list[Event]:
    """Drop the oldest half of the earlier turns (whole turns), then ask again once."""
    earlier = state.history[: turn.history_start]
    starts = [i for i, m in enumerate(earlier) if m.role == "user" and i > 0]
    if not earlier:
        return []  # nothing but this turn: compaction cannot help
    half = len(earlier) // 2
    cut = next((i for i in starts if i >= half), len(earlier))
    before = estimate_tokens(state.history)
    data = ContextCompactedData(
        dropped_messages=cut,
        tokens_before=before,
        tokens_after=before - estimate_tokens(state.history[:cut]),
    )
    return [b.make(ContextCompacted, data), b.pre(Stage.SEND_REQUEST)]


def _render(b: Builder, turn: ActiveTurn, text: str) -> Event:
    return b.make(RenderEmitted, RenderEmittedData(text=text, reply_to=turn.reply_to))


def _compose_or_stop(b: Builder, turn: ActiveTurn, config: TurnConfig) -> list[Event]:
    spec = config.stage
    if spec is not None and turn.iteration - turn.act_start >= spec.turn_cap:
        capped = StageCompletionCheckedData(
            stage=spec.stage_id,
            stage_execution_id=spec.execution_id,
            iteration=turn.iteration,
            outcome="cap_hit",
            detail=f"turnCap={spec.turn_cap} rounds passed without a valid completion",
        )
        return [b.make(StageCompletionChecked, capped)]
    if turn.iteration >= config.max_iterations:
        return b.fail(
            FailureClass.LIMIT_EXCEEDED,
            f"the turn reached maxIterations={config.max_iterations} model calls",
            "prior tool calls of this turn may have completed; send a follow-up to "
            "continue, or raise TURNSTREAM_MAX_ITERATIONS",
        )
    return [b.pre(Stage.COMPOSE_REQUEST, iteration=turn.iteration + 1)]


def _start_turn(state: SessionState, ctx: Context) -> list[Event]:
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
