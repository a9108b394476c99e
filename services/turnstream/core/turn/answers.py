"""A turn's answers from outside: what each records (`record_*`: a provider's result, a
tool call complete mid-stream, the tool hooks' and a hook point's verdicts, the context
providers' answers; None when there is nothing to record), and `on_*`, which records it
and then decides what follows (`decide_turn`).

In a session, `turnstream.core.session.run.record_on_turn` takes the `record_*` step of
the turn an answer is for (the chat's or a stage's), and the session's decider decides
what follows once; `on_*` serve a turn decided alone (tests, a chat with no session).
"""

from __future__ import annotations

from datetime import datetime
from typing import assert_never

from turnstream.core.events import (
    AssistantMessage,
    ContentBlock,
    Event,
    FailureClass,
    ProviderRequestCompleted,
    ProviderRequestCompletedData,
    ProviderRequestFailed,
    ProviderRequestFailedData,
    Stage,
    TextBlock,
    joined,
)
from turnstream.core.fold import Decision
from turnstream.core.turn.builder import Builder
from turnstream.core.turn.context import (
    ContextResult,
    awaiting_context,
    context_events,
)
from turnstream.core.turn.decide import decide_turn
from turnstream.core.turn.evolve import fold
from turnstream.core.turn.fallback import attempt_events
from turnstream.core.turn.hooks import HookPoint, HookVerdict, StageHookVerdict
from turnstream.core.turn.interceptors import (
    intercepted,
)
from turnstream.core.turn.provider import (
    ProviderFailure,
    ProviderOutcome,
    ProviderSuccess,
)
from turnstream.core.turn.runtime_tools import is_runtime_tool
from turnstream.core.turn.state import (
    ActiveTurn,
    ChatState,
    Context,
    ToolCall,
    TurnConfig,
)
from turnstream.core.turn.steps import request_model
from turnstream.core.turn.tool_call import (
    call_decided,
    propose_calls,
    requested,
)


def then_decide(
    recorded: Decision[ChatState] | None, state: ChatState, config: TurnConfig, ctx: Context
) -> Decision[ChatState]:
    """What a `record_*` step recorded, then everything that follows from it (None:
    nothing to record, and nothing follows)."""
    if recorded is None:
        return Decision((), state)
    decided = decide_turn(recorded.state, config, ctx)
    return Decision(joined(recorded.events, decided.events), decided.state)


def on_stage_hooks(
    state: ChatState, verdict: StageHookVerdict, config: TurnConfig, ctx: Context
) -> Decision[ChatState]:
    """Record what the hooks at a hook point decided, move the turn on, go on."""
    return then_decide(record_stage_hooks(state, verdict, config, ctx), state, config, ctx)


def record_stage_hooks(
    state: ChatState, verdict: StageHookVerdict, config: TurnConfig, ctx: Context
) -> Decision[ChatState] | None:
    """What the hooks at a hook point decided, and the step it moves the turn on."""
    return intercepted(state, verdict, config, ctx)


def on_provider_result(
    state: ChatState, outcome: ProviderOutcome, config: TurnConfig, ctx: Context
) -> Decision[ChatState]:
    """The events that record a provider outcome, then whatever follows from them."""
    return then_decide(record_provider_result(state, outcome, config, ctx), state, config, ctx)


def record_provider_result(
    state: ChatState, outcome: ProviderOutcome, config: TurnConfig, ctx: Context
) -> Decision[ChatState] | None:
    """The events that record a provider outcome."""
    turn = state.active
    if turn is None or not turn.awaiting_provider or turn.end:
        return None  # a late result for a turn that moved on: nothing to record
    b = Builder(state.session_id, turn, ctx)
    events: list[Event] = attempt_events(b, outcome, turn.iteration)
    match outcome:
        case ProviderSuccess():
            events += streaming(b, turn, outcome.first_byte_at)
            content: list[ContentBlock] = []
            if outcome.text:
                content.append(TextBlock(text=outcome.text))
            content += [c.block() for c in outcome.tool_calls]
            provider, model = request_model(turn, config)
            data = ProviderRequestCompletedData(
                message=AssistantMessage(content=content),
                usage=outcome.usage,
                stop_reason=outcome.stop_reason,
                iteration=turn.iteration,
                provider=provider,
                model=model,
            )
            events.append(b.make(ProviderRequestCompleted, data, outcome.finished_at))
            if HookPoint.STREAM_RESPONSE not in config.stage_hooks:
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
    return Decision(tuple(events), fold(state, events))


def streaming(b: Builder, turn: ActiveTurn, first_byte_at: datetime) -> list[Event]:
    """The model's first byte: SEND_REQUEST closed and STREAM_RESPONSE entered (one event),
    unless a call streamed complete opened it already."""
    if turn.stage is Stage.SEND_REQUEST and turn.stage_open:
        b.leave(Stage.SEND_REQUEST, "ok", first_byte_at)
    streams = turn.stage is Stage.STREAM_RESPONSE and turn.stage_open
    return b.closed([] if streams else [b.pre(Stage.STREAM_RESPONSE, first_byte_at)])


def on_context(
    state: ChatState, results: tuple[ContextResult, ...], config: TurnConfig, ctx: Context
) -> Decision[ChatState]:
    """The context providers' answers for the turn's COMPOSE_REQUEST, then what follows."""
    return then_decide(record_context(state, results, config, ctx), state, config, ctx)


def record_context(
    state: ChatState, results: tuple[ContextResult, ...], config: TurnConfig, ctx: Context
) -> Decision[ChatState] | None:
    """The context providers' answers for the turn's COMPOSE_REQUEST."""
    turn = state.active
    if turn is None or awaiting_context(state, config) is None:
        return None  # late, or already recorded (a redelivered answer)
    b = Builder(state.session_id, turn, ctx)
    events = context_events(b, results, turn.iteration)
    events.append(b.post(Stage.COMPOSE_REQUEST, "ok"))
    return Decision(tuple(events), fold(state, events))


STORAGE_FULL_NEXT_ACTION = (
    "the log's storage is full (JetStream refused this turn's events): free space "
    "(`turnstream status` shows each stream against its limit; `turnstream archive` old "
    "sessions, then purge them, or raise the limit: docs/operations.md, 'The log full'), "
    "then send the message again; tool calls of this turn may have completed"
)


def record_storage_refused(
    state: ChatState, reason: str, ctx: Context
) -> Decision[ChatState] | None:
    """The log refused the turn's events for want of storage: end it failed
    (`storage_full`), closing its open stage. None when it has ended already."""
    turn = state.active
    if turn is None or turn.end is not None:
        return None
    b = Builder(state.session_id, turn, ctx)
    events = b.fail(
        FailureClass.STORAGE_FULL,
        f"the log refused this turn's events: {reason}",
        STORAGE_FULL_NEXT_ACTION,
    )
    return Decision(tuple(events), fold(state, events))


def on_tool_call_ready(
    state: ChatState,
    call: ToolCall,
    first_byte_at: datetime,
    config: TurnConfig,
    ctx: Context,
) -> Decision[ChatState]:
    """A tool call whose block is complete while the model still streams: propose it now,
    so approval (and, once approved, the run) starts before the response ends."""
    recorded = record_tool_call_ready(state, call, first_byte_at, config, ctx)
    return then_decide(recorded, state, config, ctx)


def record_tool_call_ready(
    state: ChatState,
    call: ToolCall,
    first_byte_at: datetime,
    config: TurnConfig,
    ctx: Context,
) -> Decision[ChatState] | None:
    """The proposal of a tool call complete while the model still streams."""
    turn = state.active
    if turn is None or not turn.awaiting_provider or turn.end or turn.abort:
        return None
    if config.stage is not None or HookPoint.STREAM_RESPONSE in config.stage_hooks:
        # a stage, or a response interceptor, judges the whole response before any call
        return None
    if turn.interrupt is not None or any(c.call_id == call.id for c in turn.calls):
        return None
    if turn.tool_calls_made + 1 > config.max_tool_calls_per_turn:
        return None  # the whole response decides: the bound ends the turn then
    b = Builder(state.session_id, turn, ctx)
    events: list[Event] = []
    events += streaming(b, turn, first_byte_at)
    events += propose_calls(b, turn, config, [call], len(turn.calls))
    return Decision(tuple(events), fold(state, events))


def on_hook_verdicts(
    state: ChatState, verdicts: list[HookVerdict], config: TurnConfig, ctx: Context
) -> Decision[ChatState]:
    """Record what the tool hooks decided, request the calls they let through, go on."""
    return then_decide(record_hook_verdicts(state, verdicts, config, ctx), state, config, ctx)


def record_hook_verdicts(
    state: ChatState, verdicts: list[HookVerdict], config: TurnConfig, ctx: Context
) -> Decision[ChatState] | None:
    """What the tool hooks decided, and the requests of the calls they let through."""
    turn = state.active
    if turn is None:
        return None
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
            events.append(call_decided(b, verdict, "pre", args=args))
        if verdict.action in ("abort_turn", "hard_abort"):
            break
        if verdict.action in ("continue", "modify") and not runtime:
            args = verdict.args if verdict.action == "modify" and verdict.args else call.args
            events.append(requested(b, call, config, args))
    return Decision(tuple(events), fold(state, events))
