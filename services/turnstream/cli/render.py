"""How events look in a terminal (rich): one line per event, an approval prompt as a block
(a session's turns: `session_view`)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from turnstream.cli.summaries import summarize
from turnstream.core.events import (
    AuditViolation,
    ContextSkipped,
    Event,
    InputRejected,
    ProviderFallback,
    TurnEnded,
)

STATUS_STYLE = {"completed": "green", "failed": "red", "denied": "yellow"}


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
