"""How events and turns look in a terminal (rich): one line per event, turn timelines."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from turnstream.core.events import (
    AuditViolation,
    Event,
    FollowUpQueued,
    HookDecided,
    InputAccepted,
    InputRejected,
    InteractionAnswered,
    InteractionRequested,
    InterruptReceived,
    ProviderRequestCompleted,
    ProviderRequestFailed,
    ProviderRequestStarted,
    ProviderRetry,
    RenderEmitted,
    SessionTurnStart,
    StagePostFired,
    StagePreFired,
    SteeringInjected,
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
from turnstream.core.projection import SessionView, TurnView

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
            return f"{d.provider}/{d.model} call #{d.call_index}, {d.message_count} messages"
        case ProviderRequestCompleted(data=d):
            u = d.usage
            return f"{d.stop_reason}, {u.input_tokens} in / {u.output_tokens} out"
        case ProviderRequestFailed(data=d):
            return f"{d.error_class}: {_clip(d.message)}"
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
            return _clip(f"{d.hook} ({d.kind}) → {d.action}: {d.reason or ''}", 90)
        case AuditViolation(data=d):
            return _clip(f"{d.kind}: {d.detail}", 100)
        case TurnEnded(data=d):
            if d.status == "completed":
                return "completed"
            return f"{d.status} [{d.failure_class}] {d.reason or ''} → {d.next_action or ''}"
        case _:
            return ""


def event_line(event: Event) -> Text:
    """`12:00:01.234 session turn… Type  summary`."""
    line = Text()
    line.append(event.time.strftime("%H:%M:%S.%f")[:-3] + " ", style="dim")
    line.append(f"{event.session_id} ", style="cyan")
    line.append(f"{(event.turn_id or '-')[-8:]:>8} ", style="dim")
    style = "bold"
    if isinstance(event, TurnEnded):
        style = "bold " + STATUS_STYLE.get(event.data.status, "")
    elif isinstance(event, InputRejected | AuditViolation):
        style = "bold red"
    line.append(f"{event.type:<25}", style=style)
    line.append(summarize(event))
    return line


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f} ms"


def turn_table(turn: TurnView) -> Table:
    """A turn's stage timeline with durations."""
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
        table.add_row(
            span.stage.value,
            str(span.iteration),
            "" if offset is None else f"+{offset:.1f} ms",
            _ms(span.duration_ms),
            span.outcome or "open",
        )
    return table


def print_session(console: Console, view: SessionView) -> None:
    console.print(
        f"[bold]session {view.session_id}[/]: {len(view.turns)} turns, {view.events} events"
    )
    for turn in view.turns.values():
        console.print()
        console.print(turn_table(turn))
        who = f" ({turn.sender})" if turn.sender else ""
        console.print(f"  [dim]input{who}:[/] {_clip(turn.input_text, 100)}")
        if turn.reply:
            console.print(f"  [dim]reply:[/] {_clip(turn.reply, 100)}")
        if turn.reason and turn.status != "completed":
            console.print(f"  [red]reason:[/] {turn.reason}")
            console.print(f"  [yellow]next:[/] {turn.next_action}")
        if turn.provider_calls:
            console.print(
                f"  [dim]{turn.provider_calls} model call(s), "
                f"{turn.input_tokens} in / {turn.output_tokens} out tokens[/]"
            )
