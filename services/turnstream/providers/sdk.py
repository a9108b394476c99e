"""What the SDK-backed providers share: their settings, the retry loop, closing."""

from __future__ import annotations

from typing import Any

from turnstream.core.turn import ProviderOutcome, ProviderRequest, ToolCall
from turnstream.providers.base import DeltaSink, ToolCallSink
from turnstream.providers.retry import RetryPolicy, with_retries


class SdkProvider:
    """Subclasses set `name`, build `self.client` and implement one `_attempt`."""

    name = "sdk"
    client: Any

    def __init__(
        self,
        model: str,
        *,
        max_tokens: int = 4096,
        temperature: float | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.retry = retry or RetryPolicy()

    async def close(self) -> None:
        await self.client.close()

    async def complete(
        self,
        request: ProviderRequest,
        on_delta: DeltaSink,
        on_tool_call: ToolCallSink | None = None,
    ) -> ProviderOutcome:
        handed: set[str] = set()

        async def once(call: ToolCall) -> None:
            # a retried attempt streams the same calls again: hand each over once
            if on_tool_call is not None and call.id not in handed:
                handed.add(call.id)
                await on_tool_call(call)

        return await with_retries(lambda: self._attempt(request, on_delta, once), self.retry)

    async def _attempt(
        self, request: ProviderRequest, on_delta: DeltaSink, on_tool_call: ToolCallSink
    ) -> ProviderOutcome:
        raise NotImplementedError
