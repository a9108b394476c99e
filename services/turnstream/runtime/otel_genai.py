"""The GenAI operations of the telemetry: a `chat <model>` span around each provider call
and an `execute_tool <tool>` span around each tool run, the two client histograms (token
usage, operation duration), and message content as the semantic conventions' JSON
(recorded only when capture is on)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.metrics import Meter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from turnstream.core.events import (
    EventBase,
    ToolInvocationFailed,
    ToolInvocationRequested,
    ToolInvocationSucceeded,
)
from turnstream.core.turn import (
    Message,
    ProviderFailure,
    ProviderOutcome,
    ProviderRequest,
    ProviderSuccess,
)

if TYPE_CHECKING:
    from turnstream.providers import Provider
    from turnstream.providers.base import DeltaSink, ToolCallSink

TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48)
"""The GenAI conventions' advised bucket boundaries of the two client histograms."""


def ns_of(at: datetime) -> int:
    return int(at.timestamp() * 1e9)


class GenAIClient:
    """The spans and metrics of a process's GenAI operations: its provider calls (`chat`)
    and tool runs (`execute_tool`)."""

    def __init__(
        self,
        tracer: Tracer,
        meter: Meter,
        capture: bool,
        turn_context: Callable[[str, str | None], Context | None],
        parent_of: Callable[[EventBase, Mapping[str, str] | None], Context | None],
    ) -> None:
        self.tracer = tracer
        self.capture = capture
        self.turn_context = turn_context
        """The turn's `invoke_agent` span as a parent (`Telemetry.turn_context`)."""
        self.parent_of = parent_of
        """The parent an event's `traceparent` names, else its turn's (`Telemetry.parent_of`)."""
        self.tool_ends: dict[int, int] = {}
        """Running `execute_tool` spans with an outcome appended: span id → its time."""
        self.token_usage = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )

    async def chat(
        self,
        provider: Provider,
        request: ProviderRequest,
        on_delta: DeltaSink,
        on_tool_call: ToolCallSink | None,
    ) -> ProviderOutcome:
        """`provider.complete(...)` in a `chat` span, recording the two client metrics."""
        model = request.model or provider.model  # an LLM interceptor may ask for another
        common: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider.name,
            "gen_ai.request.model": model,
        }
        attributes = self._chat_attributes(request, common)
        parent = self.turn_context(request.trace_id or request.session_id, request.turn_id)
        span = self.tracer.start_span(
            f"chat {model}", context=parent, kind=SpanKind.CLIENT, attributes=attributes
        )
        began = time.perf_counter()
        try:
            with trace.use_span(span, end_on_exit=False, record_exception=False):
                outcome = await provider.complete(request, on_delta, on_tool_call)
        except BaseException as exc:  # cancelled (the turn ended) or a provider bug
            error = type(exc).__name__
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR, str(exc) or error))
            self.duration.record(time.perf_counter() - began, {**common, "error.type": error})
            span.end()
            raise
        self._chat_outcome(span, outcome, common, began)
        if outcome.fallback is not None:  # the fallback model answered (ProviderFallback)
            span.set_attribute("gen_ai.response.model", outcome.fallback.to_model.split("/", 1)[-1])
        span.end()
        return outcome

    def _chat_attributes(self, request: ProviderRequest, common: dict[str, Any]) -> dict[str, Any]:
        attributes = {
            **common,
            "gen_ai.conversation.id": request.session_id,
            "turnstream.turn.id": request.turn_id,
            "turnstream.iteration": request.iteration,
        }
        if self.capture:
            attributes["gen_ai.input.messages"] = json_of(
                [message_parts(m) for m in request.messages]
            )
            if request.system:
                attributes["gen_ai.system_instructions"] = json_of(
                    [{"type": "text", "content": request.system}]
                )
        return attributes

    def _chat_outcome(
        self, span: Span, outcome: ProviderOutcome, common: dict[str, Any], began: float
    ) -> None:
        """The usage or the error of a model call on its span, and the client metrics."""
        match outcome:
            case ProviderSuccess(usage=usage):
                # the conventions' input count includes what was read from or written to
                # the cache; the two are given apart as well
                read_in = usage.input_tokens + usage.cache_write_tokens + usage.cache_read_tokens
                span.set_attributes(
                    {
                        "gen_ai.usage.input_tokens": read_in,
                        "gen_ai.usage.cache_creation.input_tokens": usage.cache_write_tokens,
                        "gen_ai.usage.cache_read.input_tokens": usage.cache_read_tokens,
                        "gen_ai.usage.output_tokens": usage.output_tokens,
                        "gen_ai.response.finish_reasons": [outcome.stop_reason],
                    }
                )
                if self.capture:
                    span.set_attribute("gen_ai.output.messages", json_of([reply_parts(outcome)]))
                self.token_usage.record(read_in, {**common, "gen_ai.token.type": "input"})
                self.token_usage.record(
                    usage.output_tokens, {**common, "gen_ai.token.type": "output"}
                )
                self.duration.record(time.perf_counter() - began, common)
            case ProviderFailure(error_class=error_class):
                span.set_attribute("error.type", error_class)
                span.set_status(Status(StatusCode.ERROR, outcome.message))
                self.duration.record(
                    time.perf_counter() - began, {**common, "error.type": error_class}
                )

    @contextmanager
    def tool_span(self, request: ToolInvocationRequested, msg: Any) -> Iterator[None]:
        data = request.data
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": data.tool,
            "gen_ai.tool.call.id": data.call_id,
            "gen_ai.tool.type": "function",
            "gen_ai.conversation.id": request.session_id,
            "turnstream.invocation.id": data.invocation_id,
        }
        if self.capture:
            attributes["gen_ai.tool.call.arguments"] = json_of(data.args)
        span = self.tracer.start_span(
            f"execute_tool {data.tool}",
            context=self.parent_of(request, getattr(msg, "headers", None)),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        try:
            with trace.use_span(span, end_on_exit=False):
                yield
        finally:
            # at the outcome's time (stamped before it was appended), so the span ends
            # before anything its outcome caused, whatever this process does next
            span.end(end_time=self.tool_ends.pop(span.get_span_context().span_id, None))

    def tool_outcome(
        self, span: Span, event: ToolInvocationSucceeded | ToolInvocationFailed
    ) -> None:
        if not span.is_recording():
            return
        self.tool_ends[span.get_span_context().span_id] = ns_of(event.time)
        if isinstance(event, ToolInvocationFailed):
            span.set_attribute("error.type", event.data.error.kind)
            span.set_status(Status(StatusCode.ERROR, event.data.error.detail))
        elif self.capture:
            span.set_attribute("gen_ai.tool.call.result", event.data.output)


# --- content, as the conventions' message JSON --------------------------------------------


def json_of(value: Any) -> str:
    return orjson.dumps(value).decode()


def message_parts(message: Message) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if message.role == "tool":
        parts.append(
            {"type": "tool_call_response", "id": message.tool_call_id, "response": message.text}
        )
        return {"role": "tool", "parts": parts}
    if message.text:
        parts.append({"type": "text", "content": message.text})
    for call in message.tool_calls:
        parts.append(
            {"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}
        )
    return {"role": message.role, "parts": parts}


def reply_parts(outcome: ProviderSuccess) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if outcome.text:
        parts.append({"type": "text", "content": outcome.text})
    for call in outcome.tool_calls:
        parts.append(
            {"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}
        )
    return {"role": "assistant", "parts": parts, "finish_reason": outcome.stop_reason}
