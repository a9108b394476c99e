"""The fold of a turn's tool calls and of its hooks' decisions (`HookDecided`), two event
families of `turnstream.core.turn.evolve`.

A call moves proposed → approved → requested → succeeded | failed | cancelled, or is
denied (by the approval, or by a tool hook before it is requested); each event moves it
only from the states it may come from, so a redelivered event changes nothing.
"""

from __future__ import annotations

from typing import assert_never

from turnstream.core.events import (
    HookDecided,
    Stage,
    ToolCallApproved,
    ToolCallDenied,
    ToolCallModeInvoked,
    ToolInvocationCancelled,
    ToolInvocationFailed,
    ToolInvocationProposed,
    ToolInvocationRequested,
    ToolInvocationSucceeded,
)
from turnstream.core.immutable import with_changes
from turnstream.core.turn.changes import call_changed, denied, is_active, joined, turn_changed
from turnstream.core.turn.phases import ModelFailed, Requesting, Response, with_response
from turnstream.core.turn.state import Abort, ChatState, Message, ToolCall, ToolCallState

ToolFact = (
    ToolInvocationProposed
    | ToolCallModeInvoked
    | ToolCallApproved
    | ToolCallDenied
    | ToolInvocationRequested
    | ToolInvocationSucceeded
    | ToolInvocationFailed
    | ToolInvocationCancelled
)
OPEN: frozenset[str] = frozenset({"proposed", "approved", "requested"})


def evolve_call(state: ChatState, event: ToolFact) -> ChatState:
    """Fold one event of a tool call's life into the active turn."""
    match event:
        case ToolInvocationProposed():
            return _proposed(state, event)
        case ToolCallModeInvoked(data=data):
            return _judged(state, event)
        case ToolCallApproved(data=data):
            return call_changed(state, event, data.invocation_id, {"proposed"}, status="approved")
        case ToolCallDenied(data=data):
            why = denied(f"policy_denied ({data.authority}): {data.reason}")
            return call_changed(state, event, data.invocation_id, {"proposed", "approved"}, **why)
        case ToolInvocationRequested(data=data):
            return call_changed(
                state,
                event,
                data.invocation_id,
                {"approved"},
                status="requested",
                args=data.args,
                idempotent=data.idempotent,
                timeout_ms=data.timeout_ms,
            )
        case ToolInvocationSucceeded(data=data):
            return call_changed(
                state, event, data.invocation_id, OPEN, status="succeeded", result=data.output
            )
        case ToolInvocationFailed(data=data):
            err = data.error
            text = f"error ({err.error_class}/{err.kind}): {err.detail}"
            changes = {"status": "failed", "result": text, "is_error": True}
            return call_changed(state, event, data.invocation_id, OPEN, **changes)
        case ToolInvocationCancelled(data=data):
            changes = {
                "status": "cancelled",
                "result": f"cancelled: {data.reason}",
                "is_error": True,
            }
            return call_changed(state, event, data.invocation_id, OPEN, **changes)
        case _:
            assert_never(event)


def _proposed(state: ChatState, event: ToolInvocationProposed) -> ChatState:
    if not is_active(state, event):
        return state
    assert state.active is not None
    data = event.data
    call = ToolCallState(
        invocation_id=data.invocation_id,
        call_id=data.call_id,
        tool=data.tool,
        args=data.args,
        index=data.index,
        read_only=data.read_only,
        idempotent=False,
        timeout_ms=0,
        proposed_id=event.id,
        proposed_at=event.time,
    )
    return turn_changed(
        state,
        event,
        calls=(*state.active.calls, call),
        tool_calls_made=state.active.tool_calls_made + 1,
    )


def _judged(state: ChatState, event: ToolCallModeInvoked) -> ChatState:
    """The mode's verdict is in: the call is not judged again (bookkeeping, not a step of
    the turn: its last event stays)."""
    turn = state.active
    if turn is None or turn.turn_id != event.turn_id:
        return state
    calls = tuple(
        with_changes(c, judged=True) if c.invocation_id == event.data.invocation_id else c
        for c in turn.calls
    )
    return with_changes(state, active=with_changes(turn, calls=calls))


def evolve_hook(state: ChatState, event: HookDecided) -> ChatState:
    """Fold what a hook decided: a stop, a veto, more steering, or a change to what the
    turn holds at its point (the input, a call's arguments or result, the request, the
    response, the reply)."""
    data = event.data
    why = data.reason or "no reason given"
    if data.action in ("abort_turn", "hard_abort"):
        return turn_changed(state, event, abort=Abort(data.action, f"hook {data.hook}: {why}"))
    if data.action == "veto":
        phase = state.active.phase if state.active is not None else None
        if not isinstance(phase, ModelFailed):
            return turn_changed(state, event)  # a veto is taken where a compaction would help
        vetoed = with_changes(phase, veto=f"hook {data.hook}: {why}")
        return turn_changed(state, event, phase=vetoed)
    if data.action == "iterate" and data.text is not None and state.active is not None:
        return turn_changed(state, event, steering=(*state.active.steering, data.text))
    if data.action == "deny_tool" and data.invocation_id:
        refused = denied(f"policy_denied (hook {data.hook}): {why}")
        return call_changed(state, event, data.invocation_id, {"approved"}, **refused)
    if data.action == "continue" and data.invocation_id:
        return call_changed(state, event, data.invocation_id, {"approved"}, hooked=True)
    if data.action != "modify":
        return turn_changed(state, event)
    return _modified(state, event)


def _modified(state: ChatState, event: HookDecided) -> ChatState:
    """A hook's `modify`: what it changed, by what it carries."""
    data = event.data
    if data.stage == Stage.TOOL_CALL and data.point == "post":
        return _result_changed(state, event)
    if data.request is not None:
        phase = state.active.phase if is_active(state, event) and state.active else None
        if not isinstance(phase, Requesting):
            return turn_changed(state, event)  # asked while no request is made: nothing to change
        return turn_changed(state, event, phase=with_changes(phase, change=data.request))
    if data.response is not None:
        return _response_changed(state, event)
    if data.invocation_id and data.args is not None:
        return call_changed(
            state, event, data.invocation_id, {"approved"}, args=data.args, hooked=True
        )
    if data.text is not None and is_active(state, event):
        if data.stage == Stage.RENDER:
            return turn_changed(state, event, reply=data.text)
        if data.stage == Stage.RECEIVE_INPUT and state.history:
            *rest, last = state.history
            if last.role == "user":
                changed = with_changes(last, text=data.text)
                return turn_changed(state, event, {"history": (*rest, changed)})
    return turn_changed(state, event)


def _result_changed(state: ChatState, event: HookDecided) -> ChatState:
    """A tool interceptor changed an executed call's result (before the model sees it)."""
    data = event.data
    if data.invocation_id is None or data.output is None or state.active is None:
        return turn_changed(state, event)
    call = next((c for c in state.active.calls if c.invocation_id == data.invocation_id), None)
    is_error = data.is_error if data.is_error is not None else call is not None and call.is_error
    changes = {"result": data.output, "is_error": is_error}
    return call_changed(state, event, data.invocation_id, {"succeeded", "failed"}, **changes)


def _response_changed(state: ChatState, event: HookDecided) -> ChatState:
    """A response interceptor replaced the round's response: the history's last message,
    the reply and the calls to make are the replacement's."""
    data = event.data
    turn = state.active
    if not is_active(state, event) or turn is None or turn.round_reply is None:
        return state
    assert data.response is not None
    calls = tuple(ToolCall.of(c) for c in data.response.tool_calls)
    entry = Message("assistant", data.response.text, tool_calls=calls)
    history = state.history
    if history and history[-1].role == "assistant":
        history = history[:-1]
    stop = "tool_use" if calls else turn.stop_reason
    if stop == "tool_use" and not calls:
        stop = "end_turn"
    before = turn.round_reply
    return turn_changed(
        state,
        event,
        {"history": (*history, entry)},
        reply=joined(before, data.response.text),
        phase=with_response(turn.phase, lambda _: Response(calls, before)),
        stop_reason=stop,
    )
