"""OpenAI Chat Completions (and any compatible server) through the official `openai` SDK."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import openai
import orjson

from turnstream.core.events import StopReason, Usage
from turnstream.core.turn import (
    ProviderFailure,
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
from turnstream.providers.wire import openai_messages, openai_tools

CONNECTION_ERRORS: tuple[type[Exception], ...] = (openai.APIConnectionError, *TRANSPORT_ERRORS)
"""A call that could not reach the API, or whose stream broke off."""

_STOPS: dict[str, StopReason] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
}


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class OpenAIProvider(SdkProvider):
    name = "openai"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        cache_key: bool = False,
        **options: Any,
    ) -> None:
        super().__init__(model, **options)
        self.cache_key = cache_key
        """Send the session as `prompt_cache_key` (OpenAI's own API; a compatible server may
        refuse a field it does not know)."""
        self.client = openai.AsyncOpenAI(
            # a local OpenAI-compatible server (vLLM, Ollama, llama.cpp) needs no key
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or "not-needed",
            base_url=base_url,
            max_retries=0,  # ours, recorded as ProviderRetry events
            timeout=timeout_s,
        )

    def _params(self, request: ProviderRequest) -> dict[str, Any]:
        """The streamed Chat Completions request for `request`."""
        params: dict[str, Any] = {
            "model": request.model or self.model,  # an LLM interceptor may ask for another
            "messages": openai_messages(
                request.system, request.messages, request.volatile, request.files
            ),
            "max_tokens": self.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            params["tools"] = openai_tools(request.tools)
        if self.cache_key:  # calls of one session go to the machine that cached its prefix
            params["prompt_cache_key"] = request.session_id
        if self.temperature is not None:
            params["temperature"] = self.temperature
        return params

    async def _attempt(
        self, request: ProviderRequest, on_delta: DeltaSink, on_tool_call: ToolCallSink
    ) -> ProviderOutcome:
        params = self._params(request)
        text: list[str] = []
        calls: dict[int, _Call] = {}
        finish, usage = "stop", Usage()
        first_byte_at: datetime | None = None
        try:
            stream = await self.client.chat.completions.create(**params)
            async for chunk in stream:
                first_byte_at = first_byte_at or datetime.now(UTC)
                if chunk.usage is not None:
                    usage = _usage(chunk.usage)
                for choice in chunk.choices:
                    delta = choice.delta
                    if delta.content:
                        text.append(delta.content)
                        await on_delta(delta.content)
                    for fragment in delta.tool_calls or []:
                        if fragment.index not in calls and calls:
                            # a new call starts: the one before it is complete
                            await _hand_over(calls[max(calls)], on_tool_call)
                        call = calls.setdefault(fragment.index, _Call())
                        call.id = fragment.id or call.id
                        if fragment.function is not None:
                            call.name = fragment.function.name or call.name
                            call.arguments.append(fragment.function.arguments or "")
                    if choice.finish_reason:
                        finish = choice.finish_reason
                        if calls:
                            await _hand_over(calls[max(calls)], on_tool_call)
        except openai.APIStatusError as exc:
            code = _code(exc)
            return status_failure(exc.status_code, _message(exc), exc.response.headers, code)
        except CONNECTION_ERRORS as exc:
            return connection_failure(exc)
        except openai.APIError as exc:  # an error event inside the stream
            return stream_failure(_code(exc) or getattr(exc, "type", None), exc.message)
        try:
            tool_calls = tuple(
                ToolCall(c.id, c.name, _arguments(c)) for _, c in sorted(calls.items())
            )
        except ValueError as exc:
            return ProviderFailure(
                error_class="bad_response",
                message=str(exc),
                retryable=True,
                failed_at=datetime.now(UTC),
            )
        now = datetime.now(UTC)
        return ProviderSuccess(
            text="".join(text),
            stop_reason=_STOPS.get(finish, "end_turn"),
            usage=usage,
            first_byte_at=first_byte_at or now,
            finished_at=now,
            tool_calls=tool_calls,
        )


async def _hand_over(call: _Call, on_tool_call: ToolCallSink) -> None:
    try:
        arguments = _arguments(call)
    except ValueError:
        return  # the whole response will report it
    await on_tool_call(ToolCall(call.id, call.name, arguments))


def _arguments(call: _Call) -> dict[str, Any]:
    raw = "".join(call.arguments) or "{}"
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(
            f"tool call {call.name} arrived with arguments that are not JSON: {raw[:200]}"
        ) from exc
    if not isinstance(value, dict):
        raise ValueError(f"tool call {call.name} arguments are not an object: {raw[:200]}")
    return value


def _message(exc: openai.APIStatusError) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error", body) if isinstance(body, dict) else {}
    return str(error.get("message") if isinstance(error, dict) else exc.message) or exc.message


def _code(exc: openai.APIError) -> str | None:
    code = getattr(exc, "code", None)
    return str(code) if code else None


def _usage(usage: Any) -> Usage:
    """OpenAI counts cached tokens inside `prompt_tokens`; ours are apart (`Usage`)."""
    details = getattr(usage, "prompt_tokens_details", None)
    cached = (getattr(details, "cached_tokens", None) or 0) if details is not None else 0
    return Usage(
        input_tokens=usage.prompt_tokens - cached,
        output_tokens=usage.completion_tokens,
        cache_read_tokens=cached,
    )
