"""Events of the extension points (issue 16): the fallback model."""

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
