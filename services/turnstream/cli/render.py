"""How events and turns look in a terminal (rich): one line per event, turn timelines."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from turnstream.core.events import (
    AuditViolation,
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
    SessionTurnStart,
    Stage,
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
)
from turnstream.core.projection import ChildView, SessionView, TurnView

STATUS_STYLE = {"completed": "green", "failed": "red", "denied": "yellow"}


def _clip(text: str, width: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def summarize(event: Event) -> str:
    """The interesting part of an event, in a few words."""
    match event:
        case InputAccepted(data=d):
            return f"{d.kind} from {d.sender.kind}:{d.sender.id}: {_clip(d.text)}"
        case InputRejected(data=d):
            return f"{d.kind}: {_clip(d.reason, 90)}"
        case FollowUpQueued(data=d):
            return f"queued behind turn {d.behind_turn_id[-8:]}"
        case SteeringInjected(data=d):
            return _clip(d.text)
        case InterruptReceived(data=d):
            return f"{d.mode} interrupt from {d.sender.kind}:{d.sender.id}"
        case SessionTurnStart(data=d):
            return _clip(d.text)
        case StagePreFired(data=d):
            return f"{d.stage} ▸" + (f" (round {d.iteration})" if d.iteration else "")
        case StagePostFired(data=d):
            return f"{d.stage} ◂ {d.outcome}"
        case ProviderRequestStarted(data=d):
            tools = f", {len(d.tools)} tools" if d.tools else ""
            return f"{d.provider}/{d.model} call #{d.call_index}, {d.message_count} messages{tools}"
        case ProviderRequestCompleted(data=d):
            u = d.usage
            return f"{d.stop_reason}, {u.input_tokens} in / {u.output_tokens} out"
        case ProviderRequestFailed(data=d):
            return f"{d.error_class}: {_clip(d.message)}"
        case ContextProvided(data=d):
            cut = ", truncated" if d.truncated else ""
            return _clip(f"{d.provider}: {d.tokens} tokens{cut}: {d.content}", 100)
        case ContextSkipped(data=d):
            return _clip(f"⚠ {d.provider} skipped: {d.reason}", 100)
        case ProviderFallback(data=d):
            return _clip(f"⚠ {d.from_} → {d.to} after {d.attempts} attempt(s): {d.reason}", 110)
        case ProviderRetry(data=d):
            return f"attempt {d.attempt} in {d.delay_ms} ms ({d.error_class})"
        case RenderEmitted(data=d):
            return _clip(d.text)
        case ToolInvocationProposed(data=d):
            args = ", ".join(f"{k}={v!r}" for k, v in d.args.items())
            return _clip(f"#{d.index} {d.tool}({args})" + ("" if d.known else " — unknown tool"))
        case ToolCallModeInvoked(data=d):
            return f"mode {d.mode}: {d.verdict}"
        case ToolCallApproved(data=d):
            by = f" by {d.answered_by.kind}:{d.answered_by.id}" if d.answered_by else ""
            return f"approved ({d.authority}){by}"
        case ToolCallDenied(data=d):
            return _clip(f"denied ({d.authority}): {d.reason}", 90)
        case InteractionRequested(data=d):
            return _clip(f"{d.prompt} (id {d.interaction_id}, until {d.deadline:%H:%M:%S})", 100)
        case InteractionAnswered(data=d):
            return f"{d.decision} by {d.sender.kind}:{d.sender.id} for {d.interaction_id[-8:]}"
        case ToolInvocationRequested(data=d):
            return f"{d.tool} ({'read-only' if d.read_only else 'mutating'})"
        case ToolInvocationStarted(data=d):
            return f"attempt {d.attempt}"
        case ToolInvocationSucceeded(data=d):
            cut = " (truncated)" if d.truncated else ""
            return _clip(f"{d.duration_ms:.1f} ms{cut}: {d.output}")
        case ToolInvocationFailed(data=d):
            e = d.error
            return _clip(f"{e.error_class}/{e.kind}: {e.detail}", 90)
        case ToolInvocationCancelled(data=d):
            return d.reason
        case HookDecided(data=d):
            where = d.stage if d.point == "pre" else f"{d.stage} {d.point}"
            said = "; ".join(x for x in (_hook_change(d), d.reason) if x)
            return _clip(f"{d.hook} ({d.kind}) at {where} → {d.action}: {said}", 100)
        case AuditViolation(data=d):
            return _clip(f"{d.kind}: {d.detail}", 100)
        case PushNotificationAbandoned(data=d):
            return _clip(f"{d.webhook} gave up on update {d.update_seq}: {d.error}", 100)
        case TurnEnded(data=d):
            if d.status == "completed":
                return "completed"
            return f"{d.status} [{d.failure_class}] {d.reason or ''} → {d.next_action or ''}"
        case SessionConfigured(data=d):
            return f"agent {d.agent}"
        case MessageSent(data=d):
            return f"{d.kind} → {d.to} ({d.cause}, hops {d.hops})"
        case MessageDropped(data=d):
            return f"not sent to {d.to}: {d.reason} (hops {d.hops})"
        case SubTurnSpawned(data=d):
            return _clip(f"{d.mode} {d.child_session_id} ({d.agent or 'default'}): {d.task}", 90)
        case SubTurnEnded(data=d):
            why = f" [{d.failure_class}]" if d.failure_class else ""
            return _clip(f"{d.child_session_id} {d.status}{why}: {d.reply}", 90)
        case SubTurnResultDelivered(data=d):
            return f"{d.child_session_id} as {d.delivered_as}"
        case _:
            return ""


def depth_of(session_id: str) -> int:
    """How deep a sub-turn's session is (the runtime names children `<parent>:sub-<id>`)."""
    return session_id.count(":sub-")


def event_line(event: Event) -> Text:
    """`12:00:01.234 session turn… Type  summary`."""
    line = Text()
    line.append(event.time.strftime("%H:%M:%S.%f")[:-3] + " ", style="dim")
    line.append("  " * depth_of(event.session_id) + ("↳ " if depth_of(event.session_id) else ""))
    line.append(f"{event.session_id} ", style="cyan")
    line.append(f"{(event.turn_id or '-')[-8:]:>8} ", style="dim")
    style = "bold"
    if isinstance(event, TurnEnded):
        style = "bold " + STATUS_STYLE.get(event.data.status, "")
    elif isinstance(event, InputRejected | AuditViolation):
        style = "bold red"
    elif isinstance(event, ProviderFallback | ContextSkipped):
        style = "bold yellow"
    line.append(f"{event.type:<25}", style=style)
    line.append(summarize(event))
    return line


def print_prompt(console: Console, prompt: dict[str, Any]) -> None:
    """A pending approval prompt as a block: every argument in full (wrapped, never cut),
    since a person approves what they read here."""
    head = Text()
    head.append(f"{prompt['sessionId']}", style="bold cyan")
    head.append(" wants to run ")
    head.append(str(prompt["tool"]), style="bold")
    head.append(f"  (denied at {str(prompt['deadline'])[11:19]} unless answered)", style="dim")
    console.print(head)
    args = prompt.get("args") or {}
    for name, value in args.items():
        line = Text(f"    {name} = ", style="dim")
        line.append(value if isinstance(value, str) and "\n" in value else repr(value))
        line.overflow = "fold"
        console.print(line)
    if not args:
        console.print("    [dim](no arguments)[/]")
    console.print(Text(f"    interaction {prompt['interactionId']}", overflow="fold"))


@dataclass
class ToolNote:
    """What one proposed tool call went through, for `replay`."""

    tool: str
    args: dict[str, Any]
    iteration: int
    proposed_at: datetime
    asked_at: datetime | None = None
    answered_at: datetime | None = None
    verdict: str = "pending"
    by: str = ""
    outcome: str = ""

    @property
    def wait_s(self) -> float | None:
        """How long the call waited for a person's answer (None: nobody was asked)."""
        if self.asked_at is None or self.answered_at is None:
            return None
        return (self.answered_at - self.asked_at).total_seconds()

    def line(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.args.items())
        text = f"{self.tool}({_clip(args, 60)}) {self.verdict}"
        if self.by:
            text += f" by {self.by}"
        if self.wait_s is not None:
            text += f" after waiting {_seconds(self.wait_s)} for approval"
        return text + (f" → {self.outcome}" if self.outcome else "")


def tool_notes(events: list[Event]) -> dict[str, list[ToolNote]]:
    """Turn id → its tool calls, in order, with approval waits and results."""
    notes: dict[str, list[ToolNote]] = {}
    by_id: dict[str, ToolNote] = {}
    for event in events:
        match event:
            case ToolInvocationProposed(data=d):
                note = ToolNote(d.tool, d.args, d.iteration, event.time)
                by_id[d.invocation_id] = note
                notes.setdefault(event.turn_id or "", []).append(note)
            case InteractionRequested(data=d) if d.invocation_id in by_id:
                by_id[d.invocation_id].asked_at = event.time
            case ToolCallApproved(data=d) if d.invocation_id in by_id:
                note = by_id[d.invocation_id]
                note.verdict, note.answered_at = "approved", event.time
                if d.answered_by:
                    note.by = f"{d.answered_by.kind}:{d.answered_by.id}"
                elif note.asked_at is None:
                    note.by = str(d.authority)
            case ToolCallDenied(data=d) if d.invocation_id in by_id:
                note = by_id[d.invocation_id]
                note.verdict = "timed out" if d.timed_out else "denied"
                note.answered_at = event.time
                if d.answered_by:
                    note.by = f"{d.answered_by.kind}:{d.answered_by.id}"
            case ToolInvocationSucceeded(data=d) if d.invocation_id in by_id:
                by_id[d.invocation_id].outcome = f"ok in {d.duration_ms:.1f} ms"
            case ToolInvocationFailed(data=d) if d.invocation_id in by_id:
                by_id[d.invocation_id].outcome = f"failed ({d.error.error_class})"
            case ToolInvocationCancelled(data=d) if d.invocation_id in by_id:
                by_id[d.invocation_id].outcome = "cancelled"
    return notes


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f} ms"


def turn_table(turn: TurnView, notes: list[ToolNote] | None = None) -> Table:
    """A turn's stage timeline with durations; a TOOL_CALL row names its tools and says
    when most of it was a wait for a person's approval."""
    status = turn.status or "open"
    title = Text(f"turn {turn.turn_id}  ", style="bold")
    title.append(status, style=STATUS_STYLE.get(status, "yellow"))
    if turn.failure_class:
        title.append(f" [{turn.failure_class}]", style="red")
    title.append(f"  {_ms(turn.duration_ms)}", style="dim")
    table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    table.add_column("stage")
    table.add_column("round", justify="right")
    table.add_column("starts at", justify="right", style="dim")
    table.add_column("duration", justify="right")
    table.add_column("outcome")
    origin = turn.received_at or turn.started_at
    for span in turn.stages:
        offset = (span.started_at - origin).total_seconds() * 1000 if origin else None
        outcome = span.outcome or "open"
        if span.stage == Stage.TOOL_CALL:
            outcome += _tool_call_note([n for n in notes or [] if n.iteration == span.iteration])
        table.add_row(
            span.stage.value,
            str(span.iteration),
            "" if offset is None else f"+{offset:.1f} ms",
            _ms(span.duration_ms),
            outcome,
        )
    return table


def _tool_call_note(notes: list[ToolNote]) -> str:
    if not notes:
        return ""
    tools = ", ".join(dict.fromkeys(n.tool for n in notes))
    waits = [n.wait_s for n in notes if n.wait_s is not None]
    return f": {tools}" + (f" (approval wait {_seconds(sum(waits))})" if waits else "")


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def print_session(console: Console, view: SessionView, events: list[Event] | None = None) -> None:
    notes = tool_notes(events or [])
    turns = plural(len(view.turns), "turn")
    console.print(f"[bold]session {view.session_id}[/]: {turns}, {plural(view.events, 'event')}")
    for turn in view.turns.values():
        console.print()
        console.print(turn_table(turn, notes.get(turn.turn_id)))
        for note in notes.get(turn.turn_id, []):
            console.print(Text(f"  tool: {note.line()}", style="dim", overflow="fold"))
        who = f" ({turn.sender})" if turn.sender else ""
        console.print(f"  [dim]input{who}:[/] {_clip(turn.input_text, 100)}")
        if turn.reply:
            console.print(f"  [dim]reply:[/] {_clip(turn.reply, 100)}")
        for child in turn.children.values():
            console.print(child_line(child))
        for message in turn.messages:
            console.print(f"  [dim]message {message}[/]")
        if turn.reason and turn.status != "completed":
            console.print(f"  [red]reason:[/] {turn.reason}")
            console.print(f"  [yellow]next:[/] {turn.next_action}")
        if turn.provider_calls:
            console.print(
                f"  [dim]{turn.provider_calls} model call(s), "
                f"{turn.input_tokens} in / {turn.output_tokens} out tokens[/]"
            )


def child_line(child: ChildView) -> Text:
    """A sub-turn under its parent turn: `↳ <child session> (agent) mode status duration`."""
    status = child.status or "running"
    line = Text("  ↳ sub-turn ", style="dim")
    line.append(child.session_id, style="cyan")
    line.append(f" ({child.agent or 'default'}, {child.mode}) ")
    line.append(status, style=STATUS_STYLE.get(status, "yellow"))
    if child.failure_class:
        line.append(f" [{child.failure_class}]", style="red")
    line.append(f"  {_ms(child.duration_ms)}", style="dim")
    if child.delivered_as:
        line.append(f"  delivered as {child.delivered_as}", style="dim")
    return line


def print_status(console: Console, state: dict[str, Any], last_seq: int) -> None:
    """The turn-runner's state of a session in a few readable lines (`status --json` has
    all of it)."""
    if "error" in state:
        console.print(f"[red]the turn-runner could not answer:[/] {state['error']}")
        return
    console.print(f"[bold]session {state.get('session_id', '?')}[/] (log up to seq {last_seq})")
    ended = state.get("turns_ended", 0)
    last = state.get("last_status")
    line = f"  turns ended:  {ended}"
    if last:
        style = STATUS_STYLE.get(last, "")
        line += f" (last [{style}]{last}[/], turn {state.get('last_turn_id') or '?'})"
    console.print(line)
    active = state.get("active")
    if active:
        stage = active.get("stage", "?")
        round_ = active.get("iteration", 0)
        waiting = [c for c in active.get("calls", []) if isinstance(c, dict)]
        console.print(f"  active turn:  {active.get('turn_id')} at {stage} (round {round_})")
        if waiting:
            console.print(f"  tool calls:   {len(waiting)} in this round")
    else:
        console.print("  active turn:  none")
    console.print(f"  queued:       {len(state.get('pending') or [])} input(s) behind it")
    history = state.get("history") or []
    calls = state.get("provider_calls", 0)
    console.print(
        f"  history:      {plural(len(history), 'message')}, {plural(calls, 'model call')}"
    )
    workflow = state.get("workflow")
    if workflow:
        console.print(
            f"  workflow:     {workflow.get('name', '?')} ({workflow.get('status', '?')})"
        )


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
