"""The provider protocol the turn-runner calls during SEND_REQUEST / STREAM_RESPONSE."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from turnstream.core.turn import ProviderOutcome, ProviderRequest, ToolCall

DeltaSink = Callable[[str], Awaitable[None]]
"""Receives each text delta as it streams (the runner publishes it to `ts.live.*`)."""

ToolCallSink = Callable[[ToolCall], Awaitable[None]]
"""Receives each tool call as soon as its block is complete, while the model streams on."""


class Provider(Protocol):
    name: str
    model: str

    async def complete(
        self,
        request: ProviderRequest,
        on_delta: DeltaSink,
        on_tool_call: ToolCallSink | None = None,
    ) -> ProviderOutcome:
        """Stream one response. Failures come back as `ProviderFailure`, never raised.
        The outcome still lists every tool call, those handed over early included."""
        ...

    async def close(self) -> None:
        """Release connections (on shutdown)."""
        ...
