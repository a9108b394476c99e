"""Text for chat platforms, pure: a reply split within a platform's message limit, a tool
call as one compact status line, a prompt's question, a failed turn in one line."""

from __future__ import annotations

from typing import Any

import orjson

STATUS_CHARS = 80


def split_text(text: str, limit: int) -> list[str]:
    """`text` in parts of at most `limit` characters, cut at a paragraph, else a line, else
    a space, else anywhere; code fences left open by a cut are closed and reopened."""
    if limit < 16:
        raise ValueError(f"a message limit of {limit} characters is too small to split into")
    parts: list[str] = []
    rest = text.strip()
    while len(rest) > limit:
        room = limit - 4  # a fence closed at the cut: "\n```"
        cut = max(rest.rfind(sep, 0, room) for sep in ("\n\n", "\n", " "))
        cut = cut if cut > room // 2 else room
        head, rest = rest[:cut].rstrip(), rest[cut:].lstrip()
        if head.count("```") % 2:
            head, rest = head + "\n```", "```\n" + rest
        parts.append(head)
    if rest:
        parts.append(rest)
    return parts or [""]


def _short(value: Any, room: int) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    text = " ".join(text.split())
    return text if len(text) <= room else text[: max(room - 1, 0)] + "…"


def tool_line(tool: str, args: dict[str, Any]) -> str:
    """`🔧 read_file path=README.md`: a tool call as one line of at most `STATUS_CHARS`."""
    head = f"🔧 {tool}"
    shown = [f"{k}={_short(v, 30)}" for k, v in args.items()]
    return _short(" ".join([head, *shown]), STATUS_CHARS)


def prompt_text(tool: str, args: dict[str, Any], prompt: str) -> str:
    """An approval prompt: the call in one line and the approval service's question."""
    return f"Approval needed: {tool_line(tool, args)}\n{_short(prompt, 300)}"


def ended_text(
    status: str, reply: str | None, failure: str | None, reason: str | None, next_action: str | None
) -> str:
    """What a chat shows when a turn ends: its reply, or what went wrong and what to do."""
    if status == "completed":
        return reply or "(no reply)"
    if failure == "interrupted":
        return reply or "Stopped."
    said = " ".join(p for p in (reason, next_action) if p)
    return f"⚠️ The agent could not finish ({failure or status}). {said}".strip()
