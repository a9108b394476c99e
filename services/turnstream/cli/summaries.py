"""One event in a few words (`summarize`), per family of events: the input and the turn,
the model calls, the tools, the agents, the workflows; each family's `match` ends in
`assert_never`, so a new event kind must be given its words here."""

from __future__ import annotations

from typing import assert_never

from turnstream.core.events import (
    AuditViolation,
    ContextCompacted,
    ContextProvided,
    ContextSkipped,
    Event,
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
    PushNotificationAbandoned,
    RenderEmitted,
    SessionConfigured,
    SessionTurnEnd,
    SessionTurnStart,
    StageAssertOutcome,
    StageCancelled,
    StageCheckGateResult,
    StageCompletionChecked,
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

TurnEvent = (
    InputAccepted
    | InputRejected
    | FollowUpQueued
    | SteeringInjected
    | InterruptReceived
    | SessionTurnStart
    | StagePreFired
    | StagePostFired
    | RenderEmitted
    | TurnEnded
    | SessionTurnEnd
    | SessionConfigured
)
ProviderEvent = (
    ProviderRequestStarted
    | ProviderRequestCompleted
    | ProviderRequestFailed
    | ContextProvided
    | ContextSkipped
    | ProviderFallback
    | ProviderRetry
    | ContextCompacted
)
ToolEvent = (
    ToolInvocationProposed
    | ToolCallModeInvoked
    | ToolCallApproved
    | ToolCallDenied
    | InteractionRequested
    | InteractionAnswered
    | ToolInvocationRequested
    | ToolInvocationStarted
    | ToolInvocationSucceeded
    | ToolInvocationFailed
    | ToolInvocationCancelled
    | HookDecided
)
AgentEvent = (
    AuditViolation
    | PushNotificationAbandoned
    | MessageSent
    | MessageDropped
    | SubTurnSpawned
    | SubTurnEnded
    | SubTurnResultDelivered
)
WorkflowEvent = (
    WorkflowAttached
    | StageEntered
    | StageInitFailed
    | StageCancelled
    | StageCheckGateResult
    | StageCompletionChecked
    | StageAssertOutcome
    | StageGranted
    | StageExited
    | WorkflowExit
)

COMPLETION_MEANS = {
    "accepted": "the stage's result was taken",
    "invalid": "its result did not match the stage's schema; the model is told why",
    "batch_rejected": "the completion tool was called beside other tools; it must be alone",
    "no_call": "the model answered without calling the completion tool; it is asked to",
    "cap_hit": "the stage used up its turns",
    "interrupted": "the stage was interrupted",
}
"""What a stage's completion check said, for a person (`StageCompletionChecked.outcome`)."""


def clip(text: str, width: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def summarize(event: Event) -> str:
    """The interesting part of an event, in a few words."""
    if isinstance(event, TurnEvent):
        return _turn(event)
    if isinstance(event, ProviderEvent):
        return _provider(event)
    if isinstance(event, ToolEvent):
        return _tools(event)
    if isinstance(event, AgentEvent):
        return _agents(event)
    if isinstance(event, WorkflowEvent):
        return _workflow(event)
    assert_never(event)  # a new event type must be given its family and summary here


def _turn(event: TurnEvent) -> str:
    """The input, the turn and its stages."""
    match event:
        case InputAccepted(data=d):
            return f"{d.kind} from {d.sender.kind}:{d.sender.id}: {clip(d.text)}"
        case InputRejected(data=d):
            return f"{d.kind}: {clip(d.reason, 90)}"
        case FollowUpQueued(data=d):
            return f"queued behind turn {d.behind_turn_id[-8:]}"
        case SteeringInjected(data=d):
            return clip(d.text)
        case InterruptReceived(data=d):
            return f"{d.mode} interrupt from {d.sender.kind}:{d.sender.id}"
        case SessionTurnStart(data=d):
            return clip(d.text)
        case StagePreFired(data=d):
            entered = f"{d.stage} ▸" + (f" (round {d.iteration})" if d.iteration else "")
            left = d.previous
            return entered if left is None else f"{left.stage} ◂ {left.outcome} · {entered}"
        case StagePostFired(data=d):
            return f"{d.stage} ◂ {d.outcome}"
        case RenderEmitted(data=d):
            return clip(d.text)
        case TurnEnded(data=d):
            if d.status == "completed":
                return "completed"
            return f"{d.status} [{d.failure_class}] {d.reason or ''} → {d.next_action or ''}"
        case SessionConfigured(data=d):
            return f"agent {d.agent}"
        case SessionTurnEnd(data=d):
            return str(d.status)
        case _:
            assert_never(event)


def _provider(event: ProviderEvent) -> str:
    """The model calls and the context."""
    match event:
        case ProviderRequestStarted(data=d):
            tools = f", {len(d.tools)} tools" if d.tools else ""
            return f"{d.provider}/{d.model} call #{d.call_index}, {d.message_count} messages{tools}"
        case ProviderRequestCompleted(data=d):
            u = d.usage
            return f"{d.stop_reason}, {u.input_tokens} in / {u.output_tokens} out"
        case ProviderRequestFailed(data=d):
            return f"{d.error_class}: {clip(d.message)}"
        case ContextProvided(data=d):
            cut = ", truncated" if d.truncated else ""
            return clip(f"{d.provider}: {d.tokens} tokens{cut}: {d.content}", 100)
        case ContextSkipped(data=d):
            return clip(f"⚠ {d.provider} skipped: {d.reason}", 100)
        case ProviderFallback(data=d):
            return clip(f"⚠ {d.from_} → {d.to} after {d.attempts} attempt(s): {d.reason}", 110)
        case ProviderRetry(data=d):
            return f"attempt {d.attempt} in {d.delay_ms} ms ({d.error_class})"
        case ContextCompacted(data=d):
            tokens = f"{d.tokens_before} → {d.tokens_after} tokens"
            return f"dropped {d.dropped_messages} messages, {tokens}"
        case _:
            assert_never(event)


def _tools(event: ToolEvent) -> str:
    """Tool calls, their approval and hooks."""
    match event:
        case ToolInvocationProposed(data=d):
            args = ", ".join(f"{k}={v!r}" for k, v in d.args.items())
            return clip(f"#{d.index} {d.tool}({args})" + ("" if d.known else " — unknown tool"))
        case ToolCallModeInvoked(data=d):
            return f"mode {d.mode}: {d.verdict}"
        case ToolCallApproved(data=d):
            by = f" by {d.answered_by.kind}:{d.answered_by.id}" if d.answered_by else ""
            return f"approved ({d.authority}){by}"
        case ToolCallDenied(data=d):
            return clip(f"denied ({d.authority}): {d.reason}", 90)
        case InteractionRequested(data=d):
            return clip(f"{d.prompt} (id {d.interaction_id}, until {d.deadline:%H:%M:%S})", 100)
        case InteractionAnswered(data=d):
            return f"{d.decision} by {d.sender.kind}:{d.sender.id} for {d.interaction_id[-8:]}"
        case ToolInvocationRequested(data=d):
            return f"{d.tool} ({'read-only' if d.read_only else 'mutating'})"
        case ToolInvocationStarted(data=d):
            return f"attempt {d.attempt}"
        case ToolInvocationSucceeded(data=d):
            cut = " (truncated)" if d.truncated else ""
            return clip(f"{d.duration_ms:.1f} ms{cut}: {d.output}")
        case ToolInvocationFailed(data=d):
            e = d.error
            return clip(f"{e.error_class}/{e.kind}: {e.detail}", 90)
        case ToolInvocationCancelled(data=d):
            return d.reason
        case HookDecided(data=d):
            where = d.stage if d.point == "pre" else f"{d.stage} {d.point}"
            said = "; ".join(x for x in (_hook_change(d), d.reason) if x)
            return clip(f"{d.hook} ({d.kind}) at {where} → {d.action}: {said}", 100)
        case _:
            assert_never(event)


def _agents(event: AgentEvent) -> str:
    """Agents and sub-turns, the audit and push notifications."""
    match event:
        case AuditViolation(data=d):
            return clip(f"{d.kind}: {d.detail}", 100)
        case PushNotificationAbandoned(data=d):
            return clip(f"{d.webhook} gave up on update {d.update_seq}: {d.error}", 100)
        case MessageSent(data=d):
            return f"{d.kind} → {d.to} ({d.cause}, hops {d.hops})"
        case MessageDropped(data=d):
            return f"not sent to {d.to}: {d.reason} (hops {d.hops})"
        case SubTurnSpawned(data=d):
            return clip(f"{d.mode} {d.child_session_id} ({d.agent or 'default'}): {d.task}", 90)
        case SubTurnEnded(data=d):
            why = f" [{d.failure_class}]" if d.failure_class else ""
            return clip(f"{d.child_session_id} {d.status}{why}: {d.reply}", 90)
        case SubTurnResultDelivered(data=d):
            return f"{d.child_session_id} as {d.delivered_as}"
        case _:
            assert_never(event)


def _workflow(event: WorkflowEvent) -> str:
    """Workflow runs."""
    match event:
        case WorkflowAttached(data=d):
            return f"{d.workflow} by {d.sender.kind}:{d.sender.id}"
        case StageEntered(data=d):
            return d.stage + (f" (recovers {d.recovers})" if d.recovers else "")
        case StageInitFailed(data=d) | StageCancelled(data=d):
            return clip(f"{d.stage}: {d.reason}", 90)
        case StageCheckGateResult(data=d):
            return clip(f"{d.stage}: {d.outcome}" + (f" ({d.reason})" if d.reason else ""), 90)
        case StageCompletionChecked(data=d):
            means = COMPLETION_MEANS.get(d.outcome, "")
            return f"{d.stage}: completion {d.outcome}" + (f" ({means})" if means else "")
        case StageAssertOutcome(data=d):
            return f"{d.stage}: assert {d.verdict} (attempt {d.attempt})"
        case StageGranted(data=d):
            return f"{d.stage}: granted {d.tool}"
        case StageExited(data=d):
            return f"{d.stage}: {d.result.verdict}"
        case WorkflowExit(data=d):
            return clip(f"{d.workflow} {d.status}" + (f": {d.reason}" if d.reason else ""), 90)
        case _:
            assert_never(event)


def _hook_change(d: HookDecidedData) -> str:
    """What a hook changed, in a few words."""
    if d.request is not None:
        changed = d.request.model_dump(exclude_none=True)
        model = f"model {d.request.model}" if d.request.model else ""
        tools = f"tools {', '.join(d.request.tools)}" if d.request.tools is not None else ""
        rest = [k for k in changed if k not in ("model", "tools")]
        return ", ".join(x for x in (model, tools, *rest) if x)
    if d.response is not None:
        return f"response now {d.response.text!r}"
    if d.output is not None:
        return f"result now {d.output!r}"
    if d.compaction is not None:
        return ", ".join(f"{k} {v}" for k, v in d.compaction.model_dump(exclude_none=True).items())
    return repr(d.text) if d.text is not None else ""
