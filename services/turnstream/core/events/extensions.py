"""Events of the extension points (issue 16): the fallback model and context providers."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from turnstream.core.events.base import EventBase, WireModel


class ProviderFallbackData(WireModel):
    from_: str = Field(alias="from")
    """The model that failed, as `provider/model`."""
    to: str
    """The model the turn continues on, as `provider/model`."""
    reason: str
    """`error_class: message` of the primary's last failed attempt."""
    error_class: str
    """e.g. `overloaded`, `server_error`, `timeout`, `connection`."""
    attempts: int
    """How many attempts the primary made (its retries included) before the switch."""
    iteration: int


class ProviderFallback(EventBase):
    """The primary model failed with a retryable class after its retries: this model call,
    and the rest of the turn, go to the fallback model (`TURNSTREAM_FALLBACK_MODEL`)."""

    type: Literal["ProviderFallback"] = "ProviderFallback"
    data: ProviderFallbackData


class ContextProvidedData(WireModel):
    provider: str
    """The context provider's name (`agents_md`, `datetime`, `summary`, or a plug-in's)."""
    tokens: int
    """Estimated tokens of `content` (characters / 4), within the provider's budget."""
    digest: str
    """`sha256:<hex>` of `content`."""
    content: str
    """What the provider contributed: every request of the turn carries it, and a replay
    composes the same request from it without calling the provider again."""
    truncated: bool = False
    """The provider returned more than its token budget: `content` is cut to it."""
    volatile: bool = False
    """It changes from turn to turn (the time): requests carry it after the prompt-cache
    prefix, at their end, instead of in the system prompt."""
    iteration: int


class ContextProvided(EventBase):
    """A context provider's contribution to the turn's requests (COMPOSE_REQUEST)."""

    type: Literal["ContextProvided"] = "ContextProvided"
    data: ContextProvidedData


class ContextSkippedData(WireModel):
    provider: str
    reason: str
    """Why it contributed nothing: an error, a bad answer, or its timeout."""
    timed_out: bool = False
    iteration: int


class ContextSkipped(EventBase):
    """A context provider failed or was too slow: the turn goes on without it (a warning)."""

    type: Literal["ContextSkipped"] = "ContextSkipped"
    data: ContextSkippedData
