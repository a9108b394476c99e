"""OpenTelemetry traces and metrics of turns, after the GenAI semantic conventions.

Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` is set: `setup` then returns without importing
OpenTelemetry, and every hook below is one `None` test. On, each service process exports
OTLP/HTTP to that endpoint (the standard `OTEL_*` variables tune the exporters), and one
turn is one trace across the processes:

    invoke_agent <agent>            turn-runner   the turn, SessionTurnStart … TurnEnded
    ├── accept_input                gateway       inbound stored → InputAccepted appended
    ├── chat <model>                turn-runner   each provider call
    ├── await_approval <tool>       approval      ToolInvocationProposed → verdict
    └── execute_tool <tool>         tool-executor each tool run

The trace id is the envelope's `traceId`: the gateway makes it a UUIDv7, whose 128 bits
are the W3C trace id (32 hex digits, the UUID without dashes); any other string is hashed
to 128 bits (BLAKE2b), so every process derives the same id from the event alone. The
`invoke_agent` span's id is likewise derived from the turn id (`turn_span_id`): a turn can
span runner restarts, so its span is emitted whole when the turn ends (started at the
turn id's UUIDv7 time, when the inbound message was stored), and every other span names
it as parent without waiting for it. Events appended while tracing carry a W3C
`traceparent` header (`turnstream.bus.tracing`): the span that appended them, else the
turn's span; the executor and the approval service continue from that header.

Message content (prompts, replies, tool arguments and results) is recorded only when
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`.
"""

from __future__ import annotations

import contextvars
import hashlib
import logging
import os
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson

from turnstream.bus.tracing import set_header_hook
from turnstream.core.approval import ApprovalState
from turnstream.core.events import (
    EventBase,
    InputAccepted,
    ProviderRequestCompleted,
    SessionTurnStart,
    ToolCallApproved,
    ToolCallDenied,
    ToolInvocationFailed,
    ToolInvocationProposed,
    ToolInvocationRequested,
    ToolInvocationSucceeded,
    TurnEnded,
)
from turnstream.core.turn import (
    Message,
    ProviderFailure,
    ProviderOutcome,
    ProviderRequest,
    ProviderSuccess,
)
from turnstream.runtime.mailbox import Delivered

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span

    from turnstream.providers import Provider
    from turnstream.providers.base import DeltaSink, ToolCallSink

log = logging.getLogger("turnstream.telemetry")
ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
AGENT_NAME = "turnstream"
"""`gen_ai.agent.name` of a turn (one agent runs every session here)."""
SCOPE = "turnstream"
MAX_OPEN_TURNS = 10_000
"""Turns a runner keeps token counts for; the oldest are forgotten past this (a turn that
moved to another runner never ends here)."""
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48)
"""The GenAI conventions' advised bucket boundaries of the two client histograms."""

_active: _Telemetry | None = None
"""The process's telemetry; None when off (every hook returns at once)."""
_fixed_ids: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "turnstream_fixed_ids", default=None
)


# --- ids: pure, no OpenTelemetry ------------------------------------------------------


def trace_id_of(trace_id: str) -> int:
    """The W3C trace id of an envelope's `traceId`: its 128 bits when it is a UUID (the
    gateway's are UUIDv7), else the first 128 bits of its BLAKE2b digest."""
    try:
        value = uuid.UUID(trace_id).int
    except ValueError:
        value = int.from_bytes(hashlib.blake2b(trace_id.encode(), digest_size=16).digest())
    return value or 1


def turn_span_id(turn_id: str) -> int:
    """The span id of a turn's `invoke_agent` span, which every process can derive."""
    digest = hashlib.blake2b(f"invoke_agent:{turn_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest) or 1


def traceparent(trace_id: int, span_id: int) -> str:
    """A W3C `traceparent` header value (version 00, sampled)."""
    return f"00-{trace_id:032x}-{span_id:016x}-01"


def uuid7_time_ns(value: str) -> int | None:
    """The Unix time (ns) a UUIDv7 was made at; None for any other string."""
    try:
        parsed = uuid.UUID(value)
    except ValueError:
        return None
    return (parsed.int >> 80) * 1_000_000 if parsed.version == 7 else None


def _ns(at: datetime) -> int:
    return int(at.timestamp() * 1e9)


# --- setup -----------------------------------------------------------------------------


def setup(service: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Turn telemetry on for this process if `OTEL_EXPORTER_OTLP_ENDPOINT` is set (True);
    else do nothing at all (False). Idempotent."""
    global _active
    if _active is not None:
        return True
    if not environ.get(ENDPOINT_ENV):
        return False
    capture = environ.get(CAPTURE_ENV, "").strip().lower() == "true"
    _active = _Telemetry(service, capture, environ)
    set_header_hook(_active.headers)
    log.info("telemetry: OTLP export to %s (content %s)", environ[ENDPOINT_ENV], capture)
    return True


def shutdown() -> None:
    """Flush what is buffered and turn telemetry off (at process exit)."""
    global _active
    if _active is None:
        return
    set_header_hook(None)
    active, _active = _active, None
    active.shutdown()


def enabled() -> bool:
    return _active is not None


# --- hooks the services call -------------------------------------------------------------


def traced(provider: Provider) -> Provider:
    """`provider`, with a `chat <model>` span and metrics per call when tracing."""
    return provider if _active is None else _TracedProvider(provider)


def turn_events(events: Sequence[EventBase]) -> None:
    """turn-runner: the events it just appended; a turn's end emits its `invoke_agent`."""
    if _active is not None:
        _active.turn_events(events)


def accepted(events: Sequence[EventBase]) -> None:
    """gateway: the events it just appended; an accepted input gets an `accept_input`."""
    if _active is not None:
        _active.accepted(events)


def approval_waits(state: ApprovalState, item: object, events: Sequence[EventBase]) -> None:
    """approval: `events` decided from `state` (before them) and `item`; each verdict on a
    proposal gets an `await_approval` span from the proposal to the verdict."""
    if _active is not None:
        _active.approval_waits(state, item, events)


_OFF: AbstractContextManager[None] = nullcontext()


def tool_span(request: ToolInvocationRequested, msg: Any) -> AbstractContextManager[None]:
    """tool-executor: the `execute_tool` span around running `request` (delivered as
    `msg`, whose `traceparent` header is its parent)."""
    return _OFF if _active is None else _active.tool_span(request, msg)


# --- the implementation (imports OpenTelemetry) -------------------------------------------


class _TracedProvider:
    def __init__(self, inner: Provider) -> None:
        self.inner = inner
        self.name = inner.name
        self.model = inner.model

    async def complete(
        self,
        request: ProviderRequest,
        on_delta: DeltaSink,
        on_tool_call: ToolCallSink | None = None,
    ) -> ProviderOutcome:
        active = _active
        if active is None:
            return await self.inner.complete(request, on_delta, on_tool_call)
        return await active.chat(self.inner, request, on_delta, on_tool_call)

    async def close(self) -> None:
        await self.inner.close()


class _Telemetry:
    def __init__(self, service: str, capture: bool, environ: Mapping[str, str]) -> None:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

        class Ids(RandomIdGenerator):
            """Random ids, except for a span whose ids are derived (`_fixed_ids`)."""

            def generate_span_id(self) -> int:
                fixed = _fixed_ids.get()
                return fixed[1] if fixed else super().generate_span_id()

            def generate_trace_id(self) -> int:
                fixed = _fixed_ids.get()
                return fixed[0] if fixed else super().generate_trace_id()

        attributes: dict[str, Any] = {
            "service.namespace": "turnstream",
            "service.instance.id": f"{os.uname().nodename}-{os.getpid()}",
        }
        if not environ.get("OTEL_SERVICE_NAME"):
            attributes["service.name"] = f"turnstream-{service}"
        resource = Resource.create(attributes)
        self.capture = capture
        self.tracer_provider = TracerProvider(resource=resource, id_generator=Ids())
        self.tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        self.tracer = self.tracer_provider.get_tracer(SCOPE)
        reader = PeriodicExportingMetricReader(OTLPMetricExporter())
        self.meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
        meter = self.meter_provider.get_meter(SCOPE)
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
        self.turns: dict[str, list[Any]] = {}
        """Open turns: [input tokens, output tokens, input text or None]."""

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()

    # parents

    def turn_context(self, trace_id: str, turn_id: str | None) -> Context | None:
        """The turn's `invoke_agent` span as a (remote) parent."""
        from opentelemetry.trace import (
            NonRecordingSpan,
            SpanContext,
            TraceFlags,
            set_span_in_context,
        )

        if turn_id is None:
            return None
        span = NonRecordingSpan(
            SpanContext(
                trace_id=trace_id_of(trace_id),
                span_id=turn_span_id(turn_id),
                is_remote=True,
                trace_flags=TraceFlags(TraceFlags.SAMPLED),
            )
        )
        return set_span_in_context(span)

    def parent_of(self, event: EventBase, headers: Mapping[str, str] | None) -> Context | None:
        """The context an event's `traceparent` header names (if it is of the event's
        trace), else the event's turn span."""
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        if headers and "traceparent" in headers:
            ctx = TraceContextTextMapPropagator().extract(dict(headers))
            found = trace.get_current_span(ctx).get_span_context()
            if found.is_valid and found.trace_id == trace_id_of(event.trace_id):
                return ctx
        return self.turn_context(event.trace_id, event.turn_id)

    def headers(self, event: EventBase) -> dict[str, str]:
        """The `traceparent` an appended event carries: the span appending it (when it is
        of the event's trace), else the event's turn span. Also notes a tool's outcome on
        the `execute_tool` span that appends it."""
        from opentelemetry import trace

        trace_id = trace_id_of(event.trace_id)
        span = trace.get_current_span()
        found = span.get_span_context()
        if found.is_valid and found.trace_id == trace_id:
            if isinstance(event, ToolInvocationSucceeded | ToolInvocationFailed):
                self.tool_outcome(span, event)
            return {"traceparent": traceparent(trace_id, found.span_id)}
        if event.turn_id is None:
            return {}
        return {"traceparent": traceparent(trace_id, turn_span_id(event.turn_id))}

    # turn-runner

    def turn_events(self, events: Sequence[EventBase]) -> None:
        for event in events:
            match event:
                case SessionTurnStart(turn_id=str(turn_id)):
                    self.open_turn(turn_id)[2] = event.data.text if self.capture else None
                case ProviderRequestCompleted(turn_id=str(turn_id)):
                    counts = self.open_turn(turn_id)
                    counts[0] += event.data.usage.input_tokens
                    counts[1] += event.data.usage.output_tokens
                case TurnEnded(turn_id=str(turn_id)):
                    self.end_turn(event, turn_id, self.turns.pop(turn_id, None))

    def open_turn(self, turn_id: str) -> list[Any]:
        counts = self.turns.get(turn_id)
        if counts is None:
            if len(self.turns) >= MAX_OPEN_TURNS:
                del self.turns[next(iter(self.turns))]
            counts = self.turns[turn_id] = [0, 0, None]
        return counts

    def end_turn(self, event: TurnEnded, turn_id: str, counts: list[Any] | None) -> None:
        from opentelemetry.context import Context
        from opentelemetry.trace import SpanKind, Status, StatusCode

        end = _ns(event.time)
        start = min(uuid7_time_ns(turn_id) or end, end)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": AGENT_NAME,
            "gen_ai.conversation.id": event.session_id,
            "turnstream.turn.id": turn_id,
            "turnstream.turn.status": event.data.status,
        }
        if counts is not None:
            attributes["gen_ai.usage.input_tokens"] = counts[0]
            attributes["gen_ai.usage.output_tokens"] = counts[1]
            if counts[2] is not None:
                attributes["gen_ai.input.messages"] = _json(
                    [{"role": "user", "parts": [{"type": "text", "content": counts[2]}]}]
                )
        if event.data.failure_class is not None:
            attributes["error.type"] = event.data.failure_class.value
        token = _fixed_ids.set((trace_id_of(event.trace_id), turn_span_id(turn_id)))
        try:
            span = self.tracer.start_span(
                f"invoke_agent {AGENT_NAME}",
                context=Context(),  # a root: its ids are the derived ones
                kind=SpanKind.INTERNAL,
                attributes=attributes,
                start_time=start,
            )
        finally:
            _fixed_ids.reset(token)
        if event.data.status != "completed":
            span.set_status(Status(StatusCode.ERROR, event.data.reason))
        span.end(end_time=end)

    async def chat(
        self,
        provider: Provider,
        request: ProviderRequest,
        on_delta: DeltaSink,
        on_tool_call: ToolCallSink | None,
    ) -> ProviderOutcome:
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind, Status, StatusCode

        model = provider.model
        common: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider.name,
            "gen_ai.request.model": model,
        }
        attributes = {
            **common,
            "gen_ai.conversation.id": request.session_id,
            "turnstream.turn.id": request.turn_id,
            "turnstream.iteration": request.iteration,
        }
        if self.capture:
            attributes["gen_ai.input.messages"] = _json([_message(m) for m in request.messages])
            if request.system:
                attributes["gen_ai.system_instructions"] = _json(
                    [{"type": "text", "content": request.system}]
                )
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
        match outcome:
            case ProviderSuccess(usage=usage):
                span.set_attributes(
                    {
                        "gen_ai.usage.input_tokens": usage.input_tokens,
                        "gen_ai.usage.output_tokens": usage.output_tokens,
                        "gen_ai.response.finish_reasons": [outcome.stop_reason],
                    }
                )
                if self.capture:
                    span.set_attribute("gen_ai.output.messages", _json([_reply(outcome)]))
                self.token_usage.record(
                    usage.input_tokens, {**common, "gen_ai.token.type": "input"}
                )
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
        span.end()
        return outcome

    # gateway

    def accepted(self, events: Sequence[EventBase]) -> None:
        from opentelemetry.trace import SpanKind

        end = time.time_ns()
        for event in events:
            if not isinstance(event, InputAccepted) or event.turn_id is None:
                continue
            span = self.tracer.start_span(
                "accept_input",
                context=self.turn_context(event.trace_id, event.turn_id),
                kind=SpanKind.CONSUMER,
                attributes={
                    "gen_ai.conversation.id": event.session_id,
                    "turnstream.turn.id": event.turn_id,
                    "turnstream.sender.kind": event.data.sender.kind,
                },
                start_time=min(uuid7_time_ns(event.turn_id) or end, end),
            )
            span.end(end_time=end)

    # approval

    def approval_waits(
        self, state: ApprovalState, item: object, events: Sequence[EventBase]
    ) -> None:
        from opentelemetry.trace import SpanKind

        verdicts = [e for e in events if isinstance(e, ToolCallApproved | ToolCallDenied)]
        if not verdicts:
            return
        proposals = {p.invocation_id: p.event for p in state.proposals}
        headers: Mapping[str, str] | None = None
        if isinstance(item, Delivered) and isinstance(item.event, ToolInvocationProposed):
            proposals[item.event.data.invocation_id] = item.event
            headers = item.msg.headers
        for verdict in verdicts:
            proposal = proposals.get(verdict.data.invocation_id)
            if proposal is None:
                continue
            tool = proposal.data.tool
            approved = isinstance(verdict, ToolCallApproved)
            span = self.tracer.start_span(
                f"await_approval {tool}",
                context=self.parent_of(proposal, headers),
                kind=SpanKind.INTERNAL,
                attributes={
                    "gen_ai.conversation.id": proposal.session_id,
                    "gen_ai.tool.name": tool,
                    "gen_ai.tool.call.id": proposal.data.call_id,
                    "turnstream.invocation.id": proposal.data.invocation_id,
                    "turnstream.approval.decision": "approved" if approved else "denied",
                    "turnstream.approval.authority": verdict.data.authority,
                    "turnstream.approval.timed_out": isinstance(verdict, ToolCallDenied)
                    and verdict.data.timed_out,
                },
                start_time=_ns(proposal.time),
            )
            span.end(end_time=max(_ns(verdict.time), _ns(proposal.time)))

    # tool-executor

    @contextmanager
    def tool_span(self, request: ToolInvocationRequested, msg: Any) -> Iterator[None]:
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind

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
            attributes["gen_ai.tool.call.arguments"] = _json(data.args)
        span = self.tracer.start_span(
            f"execute_tool {data.tool}",
            context=self.parent_of(request, getattr(msg, "headers", None)),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        with trace.use_span(span, end_on_exit=True):
            yield

    def tool_outcome(
        self, span: Span, event: ToolInvocationSucceeded | ToolInvocationFailed
    ) -> None:
        from opentelemetry.trace import Status, StatusCode

        if not span.is_recording():
            return
        if isinstance(event, ToolInvocationFailed):
            span.set_attribute("error.type", event.data.error.kind)
            span.set_status(Status(StatusCode.ERROR, event.data.error.detail))
        elif self.capture:
            span.set_attribute("gen_ai.tool.call.result", event.data.output)


# --- content, as the conventions' message JSON --------------------------------------------


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


def _message(message: Message) -> dict[str, Any]:
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


def _reply(outcome: ProviderSuccess) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if outcome.text:
        parts.append({"type": "text", "content": outcome.text})
    for call in outcome.tool_calls:
        parts.append(
            {"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}
        )
    return {"role": "assistant", "parts": parts, "finish_reason": outcome.stop_reason}
