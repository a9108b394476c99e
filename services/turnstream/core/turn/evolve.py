"""`evolve(state, event)`: fold one event into a session's state."""

from __future__ import annotations

from typing import assert_never

from turnstream.core.events import (
    AuditViolation,
    ContextCompacted,
    ContextProvided,
    ContextSkipped,
    Envelope,
    Event,
    EventBase,
    FollowUpQueued,
    HookDecided,
    HookDecidedData,
    InputAccepted,
    InputRejected,
    InteractionAnswered,
    InteractionRequested,
    InterruptReceived,
    MessageDropped,
    MessageSent,
    ProviderFallback,
    ProviderRequestCompleted,
    ProviderRequestFailed,
    ProviderRequestStarted,
    ProviderRetry,
    RenderEmitted,
    SessionConfigured,
    SessionTurnEnd,
    SessionTurnStart,
    Stage,
    StageAssertOutcome,
    StageCancelled,
    StageCheckGateResult,
    StageCompletionChecked,
    StageCompletionCheckedData,
    StageEntered,
    StageExited,
    StageGranted,
    StageInitFailed,
    StagePostFired,
    StagePreFired,
    SteeringInjected,
    SubTurnEnded,
    SubTurnResultDelivered,
    SubTurnSpawned,
    ToolCallApproved,
    ToolCallDenied,
    ToolCallModeInvoked,
    ToolInvocationCancelled,
    ToolInvocationFailed,
    ToolInvocationProposed,
    ToolInvocationRequested,
    ToolInvocationStarted,
    ToolInvocationSucceeded,
    TurnEnded,
    WorkflowAttached,
    WorkflowExit,
)
from turnstream.core.fold import projector
from turnstream.core.immutable import with_changes
from turnstream.core.turn import subturns
from turnstream.core.turn.context import running_summary
from turnstream.core.turn.state import (
    ActiveTurn,
    CallStatus,
    ChatState,
    ChildResult,
    Message,
    PendingInput,
    ToolCall,
    ToolCallState,
    Unanswered,
)


def evolve(state: ChatState, event: Event) -> ChatState:
    """Fold one event into the session state."""
    match event:
        case InputAccepted(data=data):
            pending = PendingInput(
                input_id=event.id,
                turn_id=event.turn_id or event.id,
                chat_id=event.chat_id,
                trace_id=event.trace_id,
                correlation_id=event.correlation_id,
                kind=data.kind,
                text=data.text,
                sender=data.sender,
                reply_to=data.reply_to,
                key=data.idempotency_key,
                hops=data.hops,
                depth=data.parent.depth if data.parent is not None else 0,
                budget=data.parent.budget if data.parent is not None else None,
            )
            child = subturns.child_for_reply(state, data.in_reply_to)
            early = child is None and subturns.spawning(state, data.in_reply_to)
            if child is not None or early:  # a sub-turn's reply: its result, not a new turn
                outcome = data.outcome
                result = ChildResult(
                    status=outcome.status if outcome is not None else "completed",
                    failure=outcome.failure_class if outcome is not None else None,
                    reply=data.text,
                    child_turn_id=outcome.turn_id if outcome is not None else None,
                    input=pending,
                )
                if child is None:
                    assert data.in_reply_to is not None
                    return subturns.replied_early(state, data.in_reply_to, result)
                return subturns.replied(state, child, result)
            return with_changes(state, pending=(*state.pending, pending))
        case SessionConfigured(data=data):
            return state if state.agent is not None else with_changes(state, agent=data)
        case SubTurnSpawned(data=data):
            state = subturns.spawned(state, event)
            return _call(state, event, data.invocation_id, {"approved"}, status="requested")
        case SubTurnEnded():
            return subturns.ended(state, event)
        case SubTurnResultDelivered():
            return subturns.delivered(state, event)
        case InputRejected(data=data) if data.reply_to is not None and event.turn_id:
            if any(u.turn_id == event.turn_id for u in state.unanswered):
                return state
            unanswered = Unanswered(
                turn_id=event.turn_id,
                reply_to=data.reply_to,
                key=data.idempotency_key or "",
                hops=data.hops,
                reason=data.reason,
                envelope=Envelope.of(event),
                event_id=event.id,
            )
            return with_changes(state, unanswered=(*state.unanswered, unanswered))
        case MessageSent(data=data) | MessageDropped(data=data) if data.cause == "replyTo" and any(
            u.turn_id == event.turn_id for u in state.unanswered
        ):
            left = tuple(u for u in state.unanswered if u.turn_id != event.turn_id)
            return with_changes(state, unanswered=left)
        case MessageSent(data=data):
            if data.kind == "interrupt":
                return subturns.interrupt_sent(state, data.invocation_id)
            if data.cause == "replyTo":
                return _turn(state, event, reply_settled=True)
            if data.cause == "send_message" and data.invocation_id:
                return _call(state, event, data.invocation_id, {"approved"}, status="requested")
            return _turn(state, event)
        case MessageDropped(data=data) if data.reason == "refused" and any(
            c.invocation_id == data.invocation_id for c in state.children
        ):
            return subturns.interrupt_sent(state, data.invocation_id)  # a refused interrupt
        case MessageDropped(data=data):
            if data.cause == "replyTo":
                return _turn(state, event, reply_settled=True)
            return _turn(state, event)
        case FollowUpQueued(data=data):
            return with_changes(
                state,
                pending=tuple(
                    with_changes(p, queued=True) if p.input_id == data.input_id else p
                    for p in state.pending
                ),
            )
        case SteeringInjected(data=data):
            state = _drop_pending(state, data.input_id)
            if state.active is None:
                return state
            asked = state.active.summary_asked or data.input_id.startswith(INTERRUPT_INPUT)
            steering = (*state.active.steering, data.text)
            return _turn(state, event, steering=steering, summary_asked=asked)
        case SessionTurnStart(data=data):
            started = next((p for p in state.pending if p.input_id == data.input_id), None)
            turn = ActiveTurn(
                turn_id=event.turn_id or data.input_id,
                input_id=data.input_id,
                chat_id=event.chat_id,
                trace_id=event.trace_id,
                correlation_id=event.correlation_id,
                reply_to=started.reply_to if started else None,
                last_event_id=event.id,
                input_key=started.key if started else "",
                hops=started.hops if started else 0,
                depth=started.depth if started else 0,
                budget=started.budget if started else None,
                started_at=event.time,
                stage_open=False,
                history_start=len(state.history),
            )
            return with_changes(
                _drop_pending(state, data.input_id),
                active=turn,
                history=(*state.history, Message("user", data.text)),
            )
        case StagePreFired(data=data):
            if not _is_active(state, event):
                return state
            assert state.active is not None
            if data.stage is Stage.COMPOSE_REQUEST and state.active.steering:
                steered = tuple(Message("user", text) for text in state.active.steering)
                state = with_changes(state, history=state.history + steered)
                state = _turn(state, event, steering=())
            if data.stage is Stage.SEND_REQUEST:
                state = _turn(state, event, request_change=None)  # each request asks anew
            return _turn(state, event, stage=data.stage, stage_open=True, iteration=data.iteration)
        case StagePostFired(data=data):
            if data.stage is Stage.TOOL_CALL and _is_active(state, event):
                state = _append_tool_results(state)
                state = _turn(state, event, calls=(), requested_calls=())
            if data.stage is Stage.COMPOSE_REQUEST:
                state = _turn(state, event, context_gathered=True)
            return _turn(state, event, stage=data.stage, stage_open=False)
        case ContextProvided(data=data):
            if not _is_active(state, event):
                return state
            assert state.active is not None
            added = (*state.active.context, (data.provider, data.content))
            return _turn(state, event, context=added)
        case ContextSkipped():
            return _turn(state, event)
        case ProviderRequestStarted():
            if not _is_active(state, event):
                return state
            state = with_changes(state, provider_calls=state.provider_calls + 1)
            return _turn(
                state, event, awaiting_provider=True, provider_error=None, round_reply=None
            )
        case ProviderRequestCompleted(data=data):
            if not _is_active(state, event):
                return state
            assert state.active is not None
            turn, message = state.active, data.message
            calls = tuple(ToolCall.of(b) for b in message.tool_calls)
            entry = Message("assistant", message.text, tool_calls=calls)
            state = with_changes(state, history=(*state.history, entry))
            # a new round (after tool calls, a stop hook's `iterate`) starts a new paragraph
            # of the reply; a continuation (max_tokens) joins seamlessly
            round_reply = (turn.reply, "" if turn.stop_reason == "max_tokens" else "\n\n")
            return _turn(
                state,
                event,
                awaiting_provider=False,
                stop_reason=data.stop_reason,
                reply=_join(round_reply, message.text),
                round_reply=round_reply,
                completions=turn.completions + 1,
                requested_calls=calls,
            )
        case ProviderFallback():
            return _turn(state, event, on_fallback=True)
        case ProviderRequestFailed(data=data):
            error = f"{data.error_class}: {data.message}"
            return _turn(state, event, awaiting_provider=False, provider_error=error)
        case ToolInvocationProposed(data=data):
            if not _is_active(state, event):
                return state
            assert state.active is not None
            call = ToolCallState(
                invocation_id=data.invocation_id,
                call_id=data.call_id,
                tool=data.tool,
                args=data.args,
                index=data.index,
                read_only=data.read_only,
                idempotent=False,
                timeout_ms=0,
            )
            return _turn(
                state,
                event,
                calls=(*state.active.calls, call),
                tool_calls_made=state.active.tool_calls_made + 1,
            )
        case ToolCallApproved(data=data):
            return _call(state, event, data.invocation_id, {"proposed"}, status="approved")
        case ToolCallDenied(data=data):
            text = f"policy_denied ({data.authority}): {data.reason}"
            return _call(
                state, event, data.invocation_id, {"proposed", "approved"}, **_denied(text)
            )
        case ToolInvocationRequested(data=data):
            return _call(
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
            return _call(
                state, event, data.invocation_id, _OPEN, status="succeeded", result=data.output
            )
        case ToolInvocationFailed(data=data):
            err = data.error
            text = f"error ({err.error_class}/{err.kind}): {err.detail}"
            return _call(
                state, event, data.invocation_id, _OPEN, status="failed", result=text, is_error=True
            )
        case ToolInvocationCancelled(data=data):
            text = f"cancelled: {data.reason}"
            return _call(
                state,
                event,
                data.invocation_id,
                _OPEN,
                status="cancelled",
                result=text,
                is_error=True,
            )
        case HookDecided(data=data):
            return _hook(state, event, data)
        case RenderEmitted():
            return _turn(state, event, rendered=True)
        case TurnEnded(data=data):
            if not _is_active(state, event):
                return state  # e.g. the gateway's terminal event for rejected input
            return _turn(
                state, event, ended=data.status, failure=data.failure_class, end_reason=data.reason
            )
        case SessionTurnEnd(data=data):
            if not _is_active(state, event):
                return state
            assert state.active is not None
            leftover = tuple(Message("user", text) for text in state.active.steering)
            # an early reply whose spawn was never recorded has no child to go to: it is
            # kept as an ordinary message (nothing accepted is lost)
            orphans = tuple(r.input for _, r in state.early if r.input is not None)
            return with_changes(
                state,
                active=None,
                pending=state.pending + orphans,
                early=(),
                history=state.history + leftover,
                turns_ended=state.turns_ended + 1,
                last_turn_id=state.active.turn_id,
                last_status=data.status,
            )
        case ContextCompacted(data=data):
            if not _is_active(state, event):
                return state
            assert state.active is not None
            before = state.active.history_start
            dropped = min(data.dropped_messages, before)
            summary = running_summary(state.summary, state.history[:dropped], data.summary)
            state = with_changes(state, history=state.history[dropped:], summary=summary)
            start = before - dropped
            return _turn(state, event, history_start=start, compacted=True)
        case InterruptReceived(data=data):
            current = state.active
            if current is None or current.ended or current.interrupt is not None:
                return state  # nothing to interrupt, or already interrupted
            sender = f"{data.sender.kind}:{data.sender.id}"
            interrupt = (data.mode, sender, current.iteration)
            state = subturns.interrupted(state, current.turn_id, data.mode)
            return with_changes(state, active=with_changes(current, interrupt=interrupt))
        case StageCompletionChecked(data=data):
            return _completion_checked(state, event, data)
        case StageAssertOutcome(data=data):
            if data.verdict != "retry" or state.active is None:
                return _turn(state, event)
            reason = data.reason or "the result did not pass; try again"
            return _turn(
                state,
                event,
                act_done=False,
                act_start=state.active.iteration,
                steering=(*state.active.steering, f"Retry (attempt {data.attempt + 1}): {reason}"),
            )
        case (
            WorkflowAttached()
            | StageEntered()
            | StageInitFailed()
            | StageCheckGateResult()
            | StageGranted()
            | StageCancelled()
            | StageExited()
            | WorkflowExit()
        ):
            return state  # the run's own bookkeeping: `turnstream.core.session.run`
        case (
            InputRejected()
            | ProviderRetry()
            | ToolCallModeInvoked()
            | InteractionRequested()
            | InteractionAnswered()
            | ToolInvocationStarted()
            | AuditViolation()
        ):
            return state
        case _:
            assert_never(event)


_OPEN: frozenset[str] = frozenset({"proposed", "approved", "requested"})
INTERRUPT_INPUT = "interrupt:"
"""`SteeringInjected.inputId` prefix of a graceful interrupt's request to summarise."""


fold = projector(evolve)


def _join(round_reply: tuple[str, str], text: str) -> str:
    """The turn's reply before this round, joined with the round's text."""
    before, separator = round_reply
    return before + separator + text if before and text else before + text


def _denied(text: str) -> dict[str, object]:
    return {"status": "denied", "result": text, "is_error": True}


def _is_active(state: ChatState, event: EventBase) -> bool:
    return state.active is not None and state.active.turn_id == event.turn_id


def _turn(state: ChatState, event: EventBase, **changes: object) -> ChatState:
    if not _is_active(state, event):
        return state
    assert state.active is not None
    return with_changes(state, active=with_changes(state.active, last_event_id=event.id, **changes))


def _call(
    state: ChatState,
    event: EventBase,
    invocation_id: str,
    from_status: frozenset[str] | set[str],
    **changes: object,
) -> ChatState:
    """Move one call of the active turn on, if it is in one of `from_status` (idempotent)."""
    if not _is_active(state, event):
        return state
    assert state.active is not None
    calls = state.active.calls
    for i, call in enumerate(calls):
        if call.invocation_id == invocation_id:
            if call.status not in from_status:
                return state
            moved = with_changes(call, **changes)
            return _turn(state, event, calls=(*calls[:i], moved, *calls[i + 1 :]))
    return state


def _hook(state: ChatState, event: EventBase, data: HookDecidedData) -> ChatState:
    why = data.reason or "no reason given"
    if data.action in ("abort_turn", "hard_abort"):
        return _turn(state, event, abort=(data.action, f"hook {data.hook}: {why}"))
    if data.action == "veto":
        return _turn(state, event, compaction_veto=f"hook {data.hook}: {why}")
    if data.action == "iterate" and data.text is not None and state.active is not None:
        return _turn(state, event, steering=(*state.active.steering, data.text))
    if data.action == "modify" and data.stage == Stage.TOOL_CALL and data.point == "post":
        return _result_changed(state, event, data)
    if data.action == "modify" and data.request is not None:
        return _turn(state, event, request_change=data.request)
    if data.action == "modify" and data.response is not None:
        return _response_changed(state, event, data)
    if data.action == "deny_tool" and data.invocation_id:
        denied = f"policy_denied (hook {data.hook}): {why}"
        return _call(state, event, data.invocation_id, {"approved"}, **_denied(denied))
    if data.action == "continue" and data.invocation_id:
        return _call(state, event, data.invocation_id, {"approved"}, hooked=True)
    if data.action != "modify":
        return _turn(state, event)
    if data.invocation_id and data.args is not None:
        return _call(state, event, data.invocation_id, {"approved"}, args=data.args, hooked=True)
    if data.text is not None and _is_active(state, event):
        if data.stage == Stage.RENDER:
            return _turn(state, event, reply=data.text)
        if data.stage == Stage.RECEIVE_INPUT and state.history:
            *rest, last = state.history
            if last.role == "user":
                changed = with_changes(last, text=data.text)
                state = with_changes(state, history=(*rest, changed))
    return _turn(state, event)


def _result_changed(state: ChatState, event: EventBase, data: HookDecidedData) -> ChatState:
    """A tool interceptor changed an executed call's result (before the model sees it)."""
    if data.invocation_id is None or data.output is None or state.active is None:
        return _turn(state, event)
    call = next((c for c in state.active.calls if c.invocation_id == data.invocation_id), None)
    is_error = data.is_error if data.is_error is not None else call is not None and call.is_error
    changes = {"result": data.output, "is_error": is_error}
    return _call(state, event, data.invocation_id, {"succeeded", "failed"}, **changes)


def _response_changed(state: ChatState, event: EventBase, data: HookDecidedData) -> ChatState:
    """A response interceptor replaced the round's response: the history's last message,
    the reply and the calls to make are the replacement's."""
    turn = state.active
    if not _is_active(state, event) or turn is None or turn.round_reply is None:
        return state
    assert data.response is not None
    calls = tuple(ToolCall.of(c) for c in data.response.tool_calls)
    entry = Message("assistant", data.response.text, tool_calls=calls)
    history = state.history
    if history and history[-1].role == "assistant":
        history = history[:-1]
    state = with_changes(state, history=(*history, entry))
    stop = "tool_use" if calls else turn.stop_reason
    if stop == "tool_use" and not calls:
        stop = "end_turn"
    return _turn(
        state,
        event,
        reply=_join(turn.round_reply, data.response.text),
        requested_calls=calls,
        stop_reason=stop,
    )


def _completion_checked(
    state: ChatState, event: EventBase, data: StageCompletionCheckedData
) -> ChatState:
    """A stage's completion channel judged a response: answer its calls, or steer."""
    if not _is_active(state, event):
        return state
    assert state.active is not None
    detail = data.detail or ""
    if data.outcome == "no_call":
        state = with_changes(state, history=(*state.history, Message("user", detail)))
    else:
        is_error = data.outcome != "accepted"
        answers = tuple(
            Message("tool", detail, tool_call_id=call_id, is_error=is_error)
            for call_id in data.call_ids
        )
        state = with_changes(state, history=state.history + answers)
    done = data.outcome in ("accepted", "cap_hit", "interrupted")
    return _turn(state, event, checked_round=data.iteration, act_done=done, requested_calls=())


def _append_tool_results(state: ChatState) -> ChatState:
    """The round's results join the history in the model's call order."""
    assert state.active is not None
    results = tuple(
        Message("tool", call.result, tool_call_id=call.call_id, is_error=call.is_error)
        for call in sorted(state.active.calls, key=lambda c: c.index)
    )
    return with_changes(state, history=state.history + results)


def _drop_pending(state: ChatState, input_id: str) -> ChatState:
    return with_changes(state, pending=tuple(p for p in state.pending if p.input_id != input_id))


__all__ = ["CallStatus", "evolve", "fold"]
