"""The provider protocol the turn-runner calls during SEND_REQUEST / STREAM_RESPONSE."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from turnstream.core.turn import ProviderOutcome, ProviderRequest

DeltaSink = Callable[[str], Awaitable[None]]
"""Receives each text delta as it streams (the runner publishes it to `ts.live.*`)."""


class Provider(Protocol):
    name: str
    model: str

    async def complete(self, request: ProviderRequest, on_delta: DeltaSink) -> ProviderOutcome:
        """Stream one response. Failures come back as `ProviderFailure`, never raised."""
        ...

    async def close(self) -> None:
        """Release connections (on shutdown)."""
        ...
