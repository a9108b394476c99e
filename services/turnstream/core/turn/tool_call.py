"""The TOOL_CALL stage: proposing calls, judging them, scheduling approved ones, skipping
on interrupt.

A call is judged by the approval rules (`turnstream.core.approval.judge`) in the decision
that proposes it, so one that needs no person is approved (or denied) with no hop to the
approval service; one that does waits for its answer (`ToolCallApproved`/`Denied`).

Consecutive read-only calls are requested together; a mutating call goes alone, once
everything before it is done; always in the model's call order.
"""

from __future__ import annotations

from typing import Any, Literal

from turnstream.core import approval
from turnstream.core.events import (
    Event,
    FailureClass,
    HookDecided,
    HookDecidedData,
    Stage,
    StageEnvelope,
    ToolError,
    ToolInvocationCancelled,
    ToolInvocationCancelledData,
    ToolInvocationFailed,
    ToolInvocationFailedData,
    ToolInvocationProposed,
    ToolInvocationProposedData,
    ToolInvocationRequested,
    ToolInvocationRequestedData,
)
from turnstream.core.turn.builder import Builder
from turnstream.core.turn.hooks import HookVerdict
from turnstream.core.turn.runtime_tools import is_runtime_tool
from turnstream.core.turn.state import (
    ActiveTurn,
    ChatState,
    ToolCall,
    ToolCallState,
    TurnConfig,
)


def awaiting_hooks(state: ChatState, config: TurnConfig) -> list[ToolCallState]:
    """Approved calls ready to go that the tool hooks must see first (the shell runs them)."""
    turn = state.active
    if not config.tool_hooks or turn is None or turn.end or turn.abort:
        return []
    streaming = turn.stage is Stage.STREAM_RESPONSE and turn.awaiting_provider
    if not (turn.stage is Stage.TOOL_CALL or streaming) or not turn.stage_open:
        return []
    runtime = [
        c
        for c in dispatchable(turn.calls)
        if is_runtime_tool(c.tool) and not c.hooked and turn.stage is Stage.TOOL_CALL
    ]
    return executable(turn.calls) + runtime


def executable(calls: tuple[ToolCallState, ...]) -> list[ToolCallState]:
    """The dispatchable calls a tool-executor runs (the runtime runs `send_message` and
    `spawn` itself: `runtime_calls` judges them, `core.session.outbound` sends them)."""
    return [c for c in dispatchable(calls) if not is_runtime_tool(c.tool)]


def dispatchable(calls: tuple[ToolCallState, ...]) -> list[ToolCallState]:
    """Approved calls that may be requested now: consecutive read-only calls together,
    a mutating call alone once everything before it is done; always in call order."""
    ready: list[ToolCallState] = []
    for i, call in enumerate(calls):
        if call.status == "proposed":
            break  # approvals arrive in call order; later calls wait for this one
        if call.status != "approved":
            continue
        earlier = calls[:i]
        if call.read_only:
            if any(not e.read_only and not e.done for e in earlier):
                break
            ready.append(call)
        else:
            if any(not e.done for e in earlier) or ready:
                break
            ready.append(call)
            break
    return ready


def tool_step(b: Builder, turn: ActiveTurn, config: TurnConfig) -> list[Event] | None:
    """The round's calls moved on: skipped, proposed, judged, requested; [] while they wait,
    None once all are done."""
    calls = turn.calls
    if turn.interrupt is not None:
        skipped = skip_remaining(b, turn, config)
        if skipped:
            return skipped
    if len(calls) < len(turn.requested_calls):
        return propose(b, turn, config)
    verdicts = approvals(b, turn, config)
    if verdicts:
        return verdicts
    ready = executable(calls)
    if ready and not config.tool_hooks:
        return [requested(b, call, config, call.args) for call in ready]
    if all(call.done for call in calls):
        return None  # the round's calls are done: TOOL_CALL closes
    return []  # waiting for approvals, hooks or results


def approvals(b: Builder, turn: ActiveTurn, config: TurnConfig) -> list[Event]:
    """The approval rules' verdicts on the calls proposed and not judged yet, filed with
    each call's proposal and with ids derived from it, as the approval service derives
    them (the log keeps one copy if both ever judge)."""
    rules = config.approval
    if rules is None:
        return []
    events: list[Event] = []
    stage = _envelope(config)
    for call in turn.calls:
        if call.status != "proposed" or call.judged or call.proposed_at is None:
            continue
        origin = approval.Call(
            call.invocation_id, call.tool, call.args, stage, call.proposed_id, call.proposed_at,
            b.envelope,
        )  # fmt: skip
        events += approval.judge(origin, rules.default_mode, rules, b.ctx.now, b.ctx.source)
    return events


def skip_remaining(b: Builder, turn: ActiveTurn, config: TurnConfig) -> list[Event]:
    """A graceful interrupt: calls not started yet get a `cancelled` result (every tool call
    in the history needs one); calls already running finish."""
    reason = "skipped: the user interrupted the turn"
    todo = list(turn.requested_calls[len(turn.calls) :])
    events = propose_calls(b, turn, config, todo, len(turn.calls), skip=reason)
    waiting = [c for c in turn.calls if c.status in ("proposed", "approved")]
    proposed = [e for e in events if isinstance(e, ToolInvocationProposed)]
    ids = [c.invocation_id for c in waiting] + [e.data.invocation_id for e in proposed]
    for invocation_id in ids:
        data = ToolInvocationCancelledData(invocation_id=invocation_id, reason=reason)
        events.append(b.make(ToolInvocationCancelled, data))
    return events


def propose(b: Builder, turn: ActiveTurn, config: TurnConfig) -> list[Event]:
    todo = turn.requested_calls[len(turn.calls) :]
    limit = config.max_tool_calls_per_turn
    if turn.tool_calls_made + len(todo) > limit:
        return b.fail(
            FailureClass.LIMIT_EXCEEDED,
            f"the model asked for {len(todo)} more tool call(s) after {turn.tool_calls_made}; "
            f"maxToolCallsPerTurn={limit}",
            "prior tool calls of this turn may have completed; send a follow-up to continue, "
            "or raise TURNSTREAM_MAX_TOOL_CALLS_PER_TURN",
        )
    return propose_calls(b, turn, config, list(todo), len(turn.calls))


def propose_calls(
    b: Builder,
    turn: ActiveTurn,
    config: TurnConfig,
    todo: list[ToolCall],
    first_index: int,
    *,
    skip: str | None = None,
) -> list[Event]:
    events: list[Event] = []
    known = ", ".join(t.name for t in config.tools) or "none"
    for index, call in enumerate(todo, start=first_index):
        info = config.tool(call.name)
        invocation_id = b.ctx.new_id()
        proposed = ToolInvocationProposedData(
            invocation_id=invocation_id,
            call_id=call.id,
            tool=call.name,
            args=call.arguments,
            index=index,
            iteration=turn.iteration,
            read_only=info.read_only if info else False,
            known=info is not None,
            skip=skip,
            envelope=_envelope(config),
        )
        events.append(b.make(ToolInvocationProposed, proposed))
        if info is None and skip is None:  # a skipped call is cancelled instead
            error = ToolError(
                error_class=FailureClass.TOOL_RUNTIME_ERROR,
                kind="unknown_tool",
                detail=f"there is no tool named {call.name!r}; available: {known}",
            )
            failed = ToolInvocationFailedData(invocation_id=invocation_id, error=error)
            events.append(b.make(ToolInvocationFailed, failed))
    return events


def _envelope(config: TurnConfig) -> StageEnvelope | None:
    spec = config.stage
    if spec is None:
        return None
    return StageEnvelope(
        run_id=spec.run_id,
        stage=spec.stage_id,
        stage_execution_id=spec.execution_id,
        allowed_tools=list(spec.allowed_tools),
    )


def requested(
    b: Builder, call: ToolCallState, config: TurnConfig, args: dict[str, object]
) -> Event:
    info = config.tool(call.tool)
    data = ToolInvocationRequestedData(
        invocation_id=call.invocation_id,
        call_id=call.call_id,
        tool=call.tool,
        args=args,
        read_only=call.read_only,
        idempotent=info.idempotent if info else False,
        timeout_ms=int((info.timeout_s if info else 30.0) * 1000),
        iteration=b.turn.iteration,
    )
    return b.make(ToolInvocationRequested, data)


def call_decided(
    b: Builder, verdict: HookVerdict, point: Literal["pre", "post"], **changed: Any
) -> Event:
    """`HookDecided` for one call: the tool hooks' (`pre`, `args`) or the tool interceptor's
    (`post`, `output` and `is_error`), with what it changed (`changed`)."""
    data = HookDecidedData(
        hook=verdict.hook,
        kind=verdict.kind,
        stage=Stage.TOOL_CALL.value,
        point=point,
        action=verdict.action,
        reason=verdict.reason,
        invocation_id=verdict.invocation_id,
        timed_out=verdict.timed_out,
        **changed,
    )
    return b.make(HookDecided, data)
