"""What a context provider is: its spec (order, timeout, budget) and its call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from turnstream.core.turn.context import ContextRequest


@dataclass(frozen=True)
class ContextSpec:
    name: str
    priority: int = 100
    """Lower comes first in the system prompt."""
    timeout_ms: int = 1000
    """An answer later than this is skipped (`ContextSkipped{timedOut}`)."""
    max_tokens: int = 1000
    """Budget: a longer answer is cut to it (characters / 4) and marked `truncated`."""
    subject: str | None = None
    """Remote providers: the NATS request/reply subject that answers."""


ContextFn = Callable[[ContextRequest], Awaitable[str | None]]
"""An in-process provider: the text to add for this turn, or None/"" for nothing. Entry
points in `turnstream.context` name a `(ContextSpec, ContextFn)` pair or a callable
returning a list of them."""
