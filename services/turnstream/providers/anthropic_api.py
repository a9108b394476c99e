"""Anthropic Messages API through the official `anthropic` SDK, streaming."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

import anthropic

from turnstream.core.events import StopReason, Usage
from turnstream.core.turn import (
    ProviderOutcome,
    ProviderRequest,
    ProviderSuccess,
    ToolCall,
)
from turnstream.providers.base import DeltaSink, ToolCallSink
from turnstream.providers.errors import (
    TRANSPORT_ERRORS,
    connection_failure,
    status_failure,
    stream_failure,
)
from turnstream.providers.sdk import SdkProvider
from turnstream.providers.wire import PromptCache, anthropic_request

CONNECTION_ERRORS: tuple[type[Exception], ...] = (anthropic.APIConnectionError, *TRANSPORT_ERRORS)
"""A call that could not reach the API, or whose stream broke off."""

_STOPS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "tool_use": "tool_use",
}


class AnthropicProvider(SdkProvider):
    name = "anthropic"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        cache: PromptCache = "5m",
        **options: Any,
    ) -> None:
        super().__init__(model, **options)
        self.cache = cache
        self.client = anthropic.AsyncAnthropic(
            api_key=api_key or os.environ.get("ANTHROPIC_API_KEY"),
            base_url=base_url,
            max_retries=0,  # ours, recorded as ProviderRetry events
            timeout=timeout_s,
        )

    async def _attempt(
        self, request: ProviderRequest, on_delta: DeltaSink, on_tool_call: ToolCallSink
    ) -> ProviderOutcome:
        # an LLM interceptor may ask for another model
        model = request.model or self.model
        params = anthropic_request(request, model, self.max_tokens, self.cache)
        if self.temperature is not None:
            params["temperature"] = self.temperature
        first_byte_at: datetime | None = None
        try:
            async with self.client.messages.stream(**params) as stream:
                async for event in stream:
                    first_byte_at = first_byte_at or datetime.now(UTC)
                    if event.type == "text":
                        await on_delta(event.text)
                    elif event.type == "content_block_stop":
                        block = event.content_block
                        if block.type == "tool_use":
                            await on_tool_call(ToolCall(block.id, block.name, dict(block.input)))
                final = await stream.get_final_message()
        except anthropic.APIStatusError as exc:
            if exc.status_code == 200:  # an error event inside the stream
                return stream_failure(getattr(exc, "type", None), _message(exc))
            return status_failure(exc.status_code, _message(exc), exc.response.headers)
        except CONNECTION_ERRORS as exc:
            return connection_failure(exc)
        now = datetime.now(UTC)
        text = "".join(b.text for b in final.content if b.type == "text")
        calls = tuple(
            ToolCall(b.id, b.name, dict(b.input)) for b in final.content if b.type == "tool_use"
        )
        return ProviderSuccess(
            text=text,
            stop_reason=_STOPS.get(final.stop_reason or "end_turn", "end_turn"),
            usage=Usage(
                input_tokens=final.usage.input_tokens,
                output_tokens=final.usage.output_tokens,
                cache_write_tokens=final.usage.cache_creation_input_tokens or 0,
                cache_read_tokens=final.usage.cache_read_input_tokens or 0,
            ),
            first_byte_at=first_byte_at or now,
            finished_at=now,
            tool_calls=calls,
        )


def _message(exc: anthropic.APIStatusError) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error")
    return str((error.get("message") if isinstance(error, dict) else None) or exc.message)
