"""The built-in context providers: `agents_md`, `datetime`, `summary`."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from turnstream.context.base import ContextFn
from turnstream.core.turn.context import ContextRequest

BUILTIN_NAMES = ("agents_md", "datetime", "summary")
VOLATILE_BUILTINS = frozenset({"datetime"})
"""Built-ins whose answer changes every turn: after the prompt-cache prefix by default."""


def agents_md(workspace: Path) -> ContextFn:
    """The workspace's `AGENTS.md`, if there is one (read again only when it changes)."""
    path = workspace / "AGENTS.md"
    cached: list[tuple[float, str]] = []

    async def provide(_: ContextRequest) -> str | None:
        try:
            mtime = path.stat().st_mtime
        except OSError:
            return None
        if not cached or cached[0][0] != mtime:
            cached[:] = [(mtime, path.read_text(errors="replace").strip())]
        text = cached[0][1]
        return f"The workspace's AGENTS.md:\n{text}" if text else None

    return provide


def date_time(clock: Callable[[], datetime]) -> ContextFn:
    """The current date and time (UTC), so the model need not guess them."""

    async def provide(_: ContextRequest) -> str:
        now = clock()
        return f"Current date and time: {now:%Y-%m-%dT%H:%M:%SZ} ({now:%A})."

    return provide


async def summary(request: ContextRequest) -> str | None:
    """What compaction dropped from this session, line by line (nothing before it ran)."""
    if not request.summary:
        return None
    return f"Earlier in this conversation (compacted):\n{request.summary}"


def builtin(name: str, workspace: Path, clock: Callable[[], datetime]) -> ContextFn:
    if name == "agents_md":
        return agents_md(workspace)
    if name == "datetime":
        return date_time(clock)
    return summary
