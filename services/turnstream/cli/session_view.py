"""How a session looks in a terminal (`replay`, `status`): each turn's stage timeline with
durations, its tool calls and approval waits, its sub-turns."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from turnstream.cli.render import STATUS_STYLE
from turnstream.cli.summaries import clip
from turnstream.core.costs import PriceTable, spend
from turnstream.core.events import (
    Event,
    InputAccepted,
    InteractionRequested,
    Stage,
    ToolCallApproved,
    ToolCallDenied,
    ToolInvocationCancelled,
    ToolInvocationFailed,
    ToolInvocationProposed,
    ToolInvocationSucceeded,
)
from turnstream.core.projection import ChildView, SessionView, TurnView


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
        text = f"{self.tool}({clip(args, 60)}) {self.verdict}"
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


def spend_text(per_model: dict[str, list[int]] | None, prices: PriceTable) -> str:
    """`12,300 in (87% cached) / 450 out tokens, $0.0123`: the tokens a turn or session
    used and, where the price table knows its models, what they cost."""
    s = spend(per_model, prices)
    ratio = s.tokens.cache_hit_ratio
    cached = f" ({ratio:.0%} cached)" if ratio else ""
    text = f"{s.tokens.all_input:,} in{cached} / {s.tokens.output:,} out tokens"
    if s.dollars is not None:
        text += f", ${s.dollars:.4f}"
    if s.unpriced:
        text += f" (no price for {', '.join(s.unpriced)})"
    return text


def print_session(
    console: Console,
    view: SessionView,
    events: list[Event] | None = None,
    prices: PriceTable | None = None,
) -> None:
    notes = tool_notes(events or [])
    hops_of = {  # an agent's message: how many agents it went through (a cycle stops)
        e.turn_id: e.data.hops
        for e in events or []
        if isinstance(e, InputAccepted) and e.turn_id and e.data.hops
    }
    turns = plural(len(view.turns), "turn")
    console.print(f"[bold]session {view.session_id}[/]: {turns}, {plural(view.events, 'event')}")
    for turn in view.turns.values():
        console.print()
        console.print(turn_table(turn, notes.get(turn.turn_id)))
        for note in notes.get(turn.turn_id, []):
            console.print(Text(f"  tool: {note.line()}", style="dim", overflow="fold"))
        who = f" ({turn.sender})" if turn.sender else ""
        hops = f"[dim], hops {hops_of[turn.turn_id]}[/]" if turn.turn_id in hops_of else ""
        console.print(f"  [dim]input{who}:[/] {clip(turn.input_text, 100)}{hops}")
        if turn.attachments:
            console.print(f"  [dim]attached:[/] {', '.join(turn.attachments)}")
        if turn.reply:
            console.print(f"  [dim]reply:[/] {clip(turn.reply, 100)}")
        for child in turn.children.values():
            console.print(child_line(child))
        for message in turn.messages:
            console.print(f"  [dim]message {message}[/]")
        if turn.reason and turn.status != "completed":
            console.print(f"  [red]reason:[/] {turn.reason}")
            console.print(f"  [yellow]next:[/] {turn.next_action}")
        if turn.provider_calls:
            used = spend_text(turn.models, prices or {})
            console.print(f"  [dim]{turn.provider_calls} model call(s), {used}[/]")
    calls = sum(t.provider_calls for t in view.turns.values())
    if calls and len(view.turns) > 1:
        total = spend_text(view.models(), prices or {})
        console.print()
        console.print(f"[bold]session total:[/] {calls} model calls, {total}")


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
        phase = active.get("phase") or {}
        stage = phase.get("stage") or phase.get("kind", "?")  # `core/turn/phases.py`
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
