"""The steps that move a turn on at its hook points, shared by `decide_turn` (no hooks there)
and `interceptors` (after the hooks said so): the model request and its start, the
response's close, a compaction, the reply."""

from __future__ import annotations

from turnstream.core.events import (
    CompactionChange,
    ContextCompacted,
    ContextCompactedData,
    Event,
    FailureClass,
    HistoryMessage,
    ProviderRequestStarted,
    ProviderRequestStartedData,
    RenderEmitted,
    RenderEmittedData,
    Stage,
    StageCompletionChecked,
    StageCompletionCheckedData,
)
from turnstream.core.turn.builder import Builder
from turnstream.core.turn.completion import completion_tool
from turnstream.core.turn.context import volatile_context, with_context
from turnstream.core.turn.manifest import tools_digest
from turnstream.core.turn.provider import ProviderRequest
from turnstream.core.turn.state import (
    ActiveTurn,
    ChatState,
    Message,
    ToolCall,
    TurnConfig,
)


def compose_request(state: ChatState, config: TurnConfig) -> ProviderRequest:
    """The provider request for the active turn, built from the session history (and what
    an LLM interceptor changed in it, `ActiveTurn.request_change`)."""
    turn = state.active
    assert turn is not None, "compose_request needs an active turn"
    tools = config.tools if config.offer_tools and turn.interrupt is None else ()
    spec = config.stage
    if spec is not None and turn.interrupt is None:
        allowed = [t for t in config.tools if t.name in spec.allowed_tools]
        tools = (*allowed, completion_tool(spec))
    system = with_context(config.system_prompt, turn.context)
    split = (
        len(config.system_prompt)
        if config.system_prompt and system != config.system_prompt
        else None
    )
    messages, attachments, model = state.history, state.attachments, None
    change = turn.request_change
    if change is not None:
        if change.system is not None:
            system, split = change.system, None
        if change.messages is not None:  # a hook's messages carry no files
            messages, attachments = tuple(message_of(m) for m in change.messages), ()
        if change.tools is not None:
            offered = {t.name: t for t in tools}
            tools = tuple(offered[name] for name in change.tools if name in offered)
        model = change.model
    return ProviderRequest(
        session_id=state.session_id,
        turn_id=turn.turn_id,
        iteration=turn.iteration,
        call_index=state.provider_calls - 1,
        system=system,
        messages=messages,
        attachments=attachments,
        tools=tools,
        stage=spec.stage_id if spec else None,
        trace_id=turn.trace_id,
        agent=config.agent,
        on_fallback=turn.on_fallback,
        model=model,
        volatile=volatile_context(turn.context),
        system_split=split,
    )


def request_model(turn: ActiveTurn, config: TurnConfig) -> tuple[str, str]:
    """`(provider, model)` this round's request goes to."""
    provider, model = config.provider, config.model
    if turn.on_fallback and config.fallback is not None:
        provider, model = config.fallback
    if turn.request_change is not None and turn.request_change.model:
        model = turn.request_change.model
    return provider, model


def request_started(b: Builder, state: ChatState, config: TurnConfig) -> list[Event]:
    """`ProviderRequestStarted`: what the shell is about to ask the model, recorded first."""
    turn = state.active
    assert turn is not None
    provider, model = request_model(turn, config)
    request = compose_request(state, config)
    data = ProviderRequestStartedData(
        provider=provider,
        model=model,
        iteration=turn.iteration,
        call_index=state.provider_calls,
        message_count=len(request.messages),
        tools_digest=tools_digest(request.tools),
        tools=[t.name for t in request.tools],
    )
    return [b.make(ProviderRequestStarted, data)]


def history_message(message: Message) -> HistoryMessage:
    """A history message as hooks see it (and `HookDecided` records it)."""
    return HistoryMessage(
        role=message.role,
        text=message.text,
        tool_calls=[c.block() for c in message.tool_calls],
        tool_call_id=message.tool_call_id,
        is_error=message.is_error,
    )


def message_of(message: HistoryMessage) -> Message:
    calls = tuple(ToolCall.of(c) for c in message.tool_calls)
    return Message(message.role, message.text, calls, message.tool_call_id, message.is_error)


def estimate_tokens(messages: tuple[Message, ...]) -> int:
    """A rough token count (4 characters a token): enough to report a compaction."""
    return sum(len(m.text) + 20 * len(m.tool_calls) for m in messages) // 4 + 1


def compaction_cut(state: ChatState, turn: ActiveTurn) -> int:
    """How many messages a compaction drops: the oldest half of the earlier turns (whole
    turns); 0 when there is nothing but this turn (compaction cannot help)."""
    earlier = state.history[: turn.history_start]
    if not earlier:
        return 0
    starts = [i for i, m in enumerate(earlier) if m.role == "user" and i > 0]
    half = len(earlier) // 2
    return next((i for i in starts if i >= half), len(earlier))


def compact(
    b: Builder, state: ChatState, turn: ActiveTurn, change: CompactionChange | None = None
) -> list[Event]:
    """Drop the oldest messages before this turn (as `change` says, if a compaction
    interceptor changed it), then ask again once."""
    cut = compaction_cut(state, turn)
    if not cut:
        return []
    if change is not None and change.dropped_messages is not None:
        cut = max(1, min(change.dropped_messages, turn.history_start))
    before = estimate_tokens(state.history)
    data = ContextCompactedData(
        dropped_messages=cut,
        tokens_before=before,
        tokens_after=before - estimate_tokens(state.history[:cut]),
        summary=change.summary if change is not None else None,
    )
    return [b.make(ContextCompacted, data), b.pre(Stage.SEND_REQUEST)]


def render(b: Builder, turn: ActiveTurn, text: str) -> Event:
    return b.make(RenderEmitted, RenderEmittedData(text=text, reply_to=turn.reply_to))


def continues(turn: ActiveTurn, config: TurnConfig) -> bool:
    """The response stopped at `max_tokens` and the model may be asked to go on."""
    return turn.stop_reason == "max_tokens" and turn.completions <= config.max_output_continuations


def compose_or_stop(b: Builder, turn: ActiveTurn, config: TurnConfig) -> list[Event]:
    """Another round, unless the turn (or a workflow stage's Act) has used its bound."""
    spec = config.stage
    if spec is not None and turn.iteration - spec.act.start >= spec.turn_cap:
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
