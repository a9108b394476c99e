"""The fold of a turn's context, its model calls and, for a workflow stage's turn, the
completion channel's judgement and Assert's retry: three event families of
`turnstream.core.turn.evolve`."""

from __future__ import annotations

from typing import assert_never

from turnstream.core.costs import Tokens, add_spent, model_key
from turnstream.core.events import (
    ContextCompacted,
    ContextProvided,
    ContextSkipped,
    ProviderFallback,
    ProviderRequestCompleted,
    ProviderRequestFailed,
    ProviderRequestStarted,
    StageAssertOutcome,
    StageCompletionChecked,
)
from turnstream.core.immutable import with_changes
from turnstream.core.turn.changes import is_active, joined, turn_changed
from turnstream.core.turn.context import running_summary
from turnstream.core.turn.phases import (
    AwaitingModel,
    Ended,
    ModelFailed,
    Phase,
    Requesting,
    Responded,
    Response,
    closed,
    opened,
    with_response,
)
from turnstream.core.turn.state import ChatState, ContextBlock, Message, ToolCall

# -- context and the model ----------------------------------------------------------------


def evolve_context(
    state: ChatState, event: ContextProvided | ContextSkipped | ContextCompacted
) -> ChatState:
    match event:
        case ContextProvided(data=data):
            if not is_active(state, event):
                return state
            assert state.active is not None
            block = ContextBlock(data.provider, data.content, data.volatile)
            added = (*state.active.context, block)
            return turn_changed(state, event, context=added)
        case ContextSkipped():
            return turn_changed(state, event)
        case ContextCompacted(data=data):
            if not is_active(state, event):
                return state
            assert state.active is not None
            before = state.active.history_start
            dropped = min(data.dropped_messages, before)
            summary = running_summary(state.summary, state.history[:dropped], data.summary)
            kept = state.history[dropped:]
            chat: dict[str, object] = {"history": kept, "summary": summary}
            if state.attachments:  # those of the dropped messages go with them
                chat["attachments"] = tuple(a for m in kept for a in m.attachments)
            return turn_changed(state, event, chat, history_start=before - dropped, compacted=True)
        case _:
            assert_never(event)


def evolve_provider(
    state: ChatState,
    event: ProviderRequestStarted
    | ProviderRequestCompleted
    | ProviderFallback
    | ProviderRequestFailed,
) -> ChatState:
    match event:
        case ProviderRequestStarted():
            if not is_active(state, event):
                return state
            assert state.active is not None
            phase = state.active.phase
            if not isinstance(phase, Ended):
                change = phase.change if isinstance(phase, Requesting | AwaitingModel) else None
                phase = AwaitingModel(phase.stage, phase.open, change)
            counted = {"provider_calls": state.provider_calls + 1}
            return turn_changed(state, event, counted, phase=phase)
        case ProviderRequestCompleted():
            return _completed(state, event)
        case ProviderFallback():
            return turn_changed(state, event, on_fallback=True)
        case ProviderRequestFailed(data=data):
            if not is_active(state, event):
                return state
            assert state.active is not None
            phase = state.active.phase
            if not isinstance(phase, Ended):
                error = f"{data.error_class}: {data.message}"
                phase = ModelFailed(error, phase.stage, phase.open)
            return turn_changed(state, event, phase=phase)
        case _:
            assert_never(event)


def _completed(state: ChatState, event: ProviderRequestCompleted) -> ChatState:
    if not is_active(state, event):
        return state
    assert state.active is not None
    turn, data = state.active, event.data
    message = data.message
    calls = tuple(ToolCall.of(b) for b in message.tool_calls)
    entry = Message("assistant", message.text, tool_calls=calls)
    used, key = Tokens.of(data.usage), model_key(data.provider, data.model)
    chat = {"history": (*state.history, entry), "spent": add_spent(state.spent, key, used)}
    # a new round (after tool calls, a stop hook's `iterate`) starts a new paragraph
    # of the reply; a continuation (max_tokens) joins seamlessly
    before = (turn.reply, "" if turn.stop_reason == "max_tokens" else "\n\n")
    return turn_changed(
        state,
        event,
        chat,
        phase=_response_in(turn.phase, Response(calls, before)),
        stop_reason=data.stop_reason,
        reply=joined(before, message.text),
        completions=turn.completions + 1,
        spent=add_spent(turn.spent, key, used),
    )


def _response_in(phase: Phase, response: Response) -> Phase:
    """The phase a recorded response leaves the turn in: the stage it stands in (SEND_REQUEST,
    or STREAM_RESPONSE once a streamed call opened it), holding the response."""
    if isinstance(phase, Ended):
        return phase
    stood = opened(phase.stage) if phase.open else closed(phase.stage)
    if isinstance(stood, Requesting | Responded):
        return with_changes(stood, response=response)
    return stood


# -- a workflow stage's turn ----------------------------------------------------------------


def evolve_stage(state: ChatState, event: StageCompletionChecked | StageAssertOutcome) -> ChatState:
    match event:
        case StageCompletionChecked():
            return _completion_checked(state, event)
        case StageAssertOutcome(data=data):
            if data.verdict != "retry" or state.active is None:
                return turn_changed(state, event)
            # Act again (where the Act stands is the stage's: `core.session.fold`)
            reason = data.reason or "the result did not pass; try again"
            retry = f"Retry (attempt {data.attempt + 1}): {reason}"
            return turn_changed(state, event, steering=(*state.active.steering, retry))
        case _:
            assert_never(event)


def _completion_checked(state: ChatState, event: StageCompletionChecked) -> ChatState:
    """A stage's completion channel judged a response: answer its calls, or steer (where
    the Act stands is the stage's: `core.session.fold`)."""
    if not is_active(state, event):
        return state
    assert state.active is not None
    data = event.data
    detail = data.detail or ""
    if data.outcome == "no_call":
        history = (*state.history, Message("user", detail))
    else:
        is_error = data.outcome != "accepted"
        answers = tuple(
            Message("tool", detail, tool_call_id=call_id, is_error=is_error)
            for call_id in data.call_ids
        )
        history = state.history + answers
    answered = with_response(state.active.phase, lambda r: with_changes(r, calls=()))
    return turn_changed(state, event, {"history": history}, phase=answered)
