"""What a context provider is: its spec (order, timeout, budget) and its call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

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
    volatile: bool = False
    """Its answer changes from turn to turn (the time): it goes after the prompt-cache
    prefix, at the end of the request, so it does not make the model re-read the rest."""


class RemoteSpec(BaseModel):
    """A remote provider as it registers in the hooks bucket, under `context.<name>`."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")
    subject: str = Field(min_length=1)
    priority: int = 100
    timeout_ms: int = Field(default=1000, ge=1, le=60_000)
    max_tokens: int = Field(default=1000, ge=1)
    volatile: bool = False


ContextFn = Callable[[ContextRequest], Awaitable[str | None]]
"""An in-process provider: the text to add for this turn, or None/"" for nothing. Entry
points in `turnstream.context` name a `(ContextSpec, ContextFn)` pair or a callable
returning a list of them."""
