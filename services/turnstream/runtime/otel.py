"""The OpenTelemetry side of `turnstream.runtime.telemetry`: imported only when telemetry
is on (`telemetry.setup` with `OTEL_EXPORTER_OTLP_ENDPOINT` set).

One `Telemetry` per process: a tracer provider exporting spans and a meter provider
exporting the GenAI client histograms, both OTLP/HTTP (the exporters read the standard
`OTEL_EXPORTER_OTLP_*` variables, the processors `OTEL_BSP_*` and
`OTEL_METRIC_EXPORT_INTERVAL`); the spans and metrics of its GenAI operations (provider
calls, tool runs) are `otel_genai.py`'s.
"""

from __future__ import annotations

import contextvars
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    set_span_in_context,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from turnstream.bus.full import ALARM
from turnstream.core.approval import ApprovalState
from turnstream.core.events import (
    EventBase,
    InputAccepted,
    ProviderRequestCompleted,
    SessionTurnStart,
    StageEntered,
    ToolCallApproved,
    ToolCallDenied,
    ToolInvocationFailed,
    ToolInvocationProposed,
    ToolInvocationSucceeded,
    TurnEnded,
    WorkflowAttached,
    WorkflowExit,
)
from turnstream.runtime import otel_spans
from turnstream.runtime.mailbox import Delivered
from turnstream.runtime.otel_genai import GenAIClient, json_of, ns_of
from turnstream.runtime.trace_ids import (
    AGENT_NAME,
    MAX_OPEN_TURNS,
    SCOPE,
    run_span_id,
    trace_id_of,
    traceparent,
    turn_span_id,
    uuid7_time_ns,
)

_fixed_ids: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "turnstream_fixed_ids", default=None
)
"""(trace id, span id) of the span being started, when its ids are derived."""
_propagator = TraceContextTextMapPropagator()
log = logging.getLogger("turnstream.telemetry")


def _log_full(_options: CallbackOptions) -> list[Observation]:
    return [Observation(1 if ALARM.full else 0)]


class _Ids(RandomIdGenerator):
    """Random ids, except for a span whose ids are derived (`_fixed_ids`)."""

    def generate_span_id(self) -> int:
        fixed = _fixed_ids.get()
        return fixed[1] if fixed else super().generate_span_id()

    def generate_trace_id(self) -> int:
        fixed = _fixed_ids.get()
        return fixed[0] if fixed else super().generate_trace_id()


class Telemetry:
    """A process's providers, instruments and the spans each service hook makes."""

    def __init__(self, service: str, capture: bool, environ: Mapping[str, str]) -> None:
        attributes: dict[str, Any] = {
            "service.namespace": "turnstream",
            "service.instance.id": f"{os.uname().nodename}-{os.getpid()}",
        }
        if not environ.get("OTEL_SERVICE_NAME"):
            attributes["service.name"] = f"turnstream-{service}"
        resource = Resource.create(attributes)
        self.capture = capture
        self.tracer_provider = TracerProvider(resource=resource, id_generator=_Ids())
        self.tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        self.tracer = self.tracer_provider.get_tracer(SCOPE)
        self.sampler = self.tracer_provider.sampler
        """`OTEL_TRACES_SAMPLER`'s (always on by default): with a trace id ratio, every
        process decides the same for a turn, whose trace id it derives alike."""
        reader = PeriodicExportingMetricReader(OTLPMetricExporter())
        self.meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
        meter = self.meter_provider.get_meter(SCOPE)
        self.genai = GenAIClient(self.tracer, meter, capture, self.turn_context, self.parent_of)
        self.refused_appends = meter.create_counter(
            "turnstream.log.appends_refused",
            unit="{append}",
            description="Appends JetStream refused for want of storage (the log full)",
        )
        meter.create_observable_gauge(
            "turnstream.log.full",
            callbacks=[_log_full],
            unit="1",
            description="1 while this process's appends are refused for want of storage",
        )
        self.turns: dict[str, list[Any]] = {}
        """Open turns: [input tokens, output tokens, input text or None]."""
        self.stage_runs: dict[str, str] = {}
        """Stage turns (executions) this runner entered → their workflow run."""

    def storage_refusal(self, refused: bool, kind: str) -> None:
        """The bus's alarm: an append of `kind` refused for storage (or taken again)."""
        if refused:
            self.refused_appends.add(1, {"turnstream.subject_kind": kind})

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()

    # parents

    def turn_context(self, trace_id: str, turn_id: str | None) -> Context | None:
        """The turn's `invoke_agent` span as a (remote) parent."""
        if turn_id is None:
            return None
        return self.remote(trace_id, turn_span_id(turn_id))

    def run_context(self, trace_id: str, run_id: str) -> Context:
        """A workflow run's span as a (remote) parent."""
        return self.remote(trace_id, run_span_id(run_id))

    def remote(self, trace_id: str, span_id: int) -> Context:
        span = NonRecordingSpan(
            SpanContext(
                trace_id=trace_id_of(trace_id),
                span_id=span_id,
                is_remote=True,
                trace_flags=TraceFlags(
                    TraceFlags.SAMPLED if self.sampled(trace_id_of(trace_id)) else 0
                ),
            )
        )
        return set_span_in_context(span)

    def parent_of(self, event: EventBase, headers: Mapping[str, str] | None) -> Context | None:
        """The context an event's `traceparent` header names (if it is of the event's
        trace), else the event's turn span."""
        if headers and "traceparent" in headers:
            ctx = _propagator.extract(dict(headers))
            found = trace.get_current_span(ctx).get_span_context()
            if found.is_valid and found.trace_id == trace_id_of(event.trace_id):
                return ctx
        return self.turn_context(event.trace_id, event.turn_id)

    def headers(self, event: EventBase) -> dict[str, str]:
        """The `traceparent` an appended event carries: the span appending it (when it is
        of the event's trace), else the event's turn span. Also notes a tool's outcome on
        the `execute_tool` span that appends it. Never raises: an append must not fail for
        its telemetry."""
        try:
            return self._headers(event)
        except Exception:
            log.exception("telemetry: no traceparent for %s", event.type)
            return {}

    def _headers(self, event: EventBase) -> dict[str, str]:
        trace_id = trace_id_of(event.trace_id)
        span = trace.get_current_span()
        found = span.get_span_context()
        if found.is_valid and found.trace_id == trace_id:
            if isinstance(event, ToolInvocationSucceeded | ToolInvocationFailed):
                self.genai.tool_outcome(span, event)
            return {"traceparent": traceparent(trace_id, found.span_id, found.trace_flags.sampled)}
        if event.turn_id is None:
            return {}
        span_id = turn_span_id(event.turn_id)
        return {"traceparent": traceparent(trace_id, span_id, self.sampled(trace_id))}

    def sampled(self, trace_id: int) -> bool:
        """Whether the sampler keeps the turn's `invoke_agent` span (a root): its children,
        in every process, follow that decision rather than making their own."""
        decision = self.sampler.should_sample(None, trace_id, f"invoke_agent {AGENT_NAME}")
        return decision.decision is Decision.RECORD_AND_SAMPLE

    # turn-runner

    def turn_events(self, events: Sequence[EventBase]) -> None:
        proposals: dict[str, ToolInvocationProposed] = {}
        judged = False
        for event in events:
            match event:
                case ToolInvocationProposed(data=data):
                    proposals[data.invocation_id] = event
                case ToolCallApproved() | ToolCallDenied():
                    judged = True  # the approval rules, applied in the runner
                case SessionTurnStart(turn_id=str(turn_id)):
                    self.open_turn(turn_id)[2] = event.data.text if self.capture else None
                case ProviderRequestCompleted(turn_id=str(turn_id)):
                    counts = self.open_turn(turn_id)
                    usage = event.data.usage
                    counts[0] += usage.input_tokens + usage.cache_write_tokens
                    counts[0] += usage.cache_read_tokens  # all the input, as for each call
                    counts[1] += usage.output_tokens
                case TurnEnded(turn_id=str(turn_id)):
                    self.end_turn(event, turn_id, self.turns.pop(turn_id, None))
                case StageEntered():
                    # its stage turn (the execution) is a child of the run's span
                    if len(self.stage_runs) >= MAX_OPEN_TURNS:
                        del self.stage_runs[next(iter(self.stage_runs))]
                    self.stage_runs[event.data.stage_execution_id] = event.data.run_id
                case WorkflowExit():
                    self.end_workflow(event)
        if judged:
            self.verdict_spans(events, proposals, None, None)

    def open_turn(self, turn_id: str) -> list[Any]:
        counts = self.turns.get(turn_id)
        if counts is None:
            if len(self.turns) >= MAX_OPEN_TURNS:
                del self.turns[next(iter(self.turns))]
            counts = self.turns[turn_id] = [0, 0, None]
        return counts

    def end_turn(self, event: TurnEnded, turn_id: str, counts: list[Any] | None) -> None:
        end = ns_of(event.time)
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
                attributes["gen_ai.input.messages"] = json_of(
                    [{"role": "user", "parts": [{"type": "text", "content": counts[2]}]}]
                )
        if event.data.failure_class is not None:
            attributes["error.type"] = event.data.failure_class.value
        run_id = self.stage_runs.pop(turn_id, None)
        parent = None if run_id is None else self.run_context(event.trace_id, run_id)
        span = self.derived_span(
            f"invoke_agent {AGENT_NAME}",
            event.trace_id,
            turn_span_id(turn_id),
            parent,
            attributes,
            start,
        )
        if event.data.status == "failed":
            span.set_status(Status(StatusCode.ERROR, event.data.reason))
        span.end(end_time=end)

    def end_workflow(self, event: WorkflowExit) -> None:
        """A workflow run's span, parent of its stage turns (ids derived from the run id)."""
        end = ns_of(event.time)
        run_id = event.data.run_id
        attributes: dict[str, Any] = {
            "gen_ai.conversation.id": event.session_id,
            "turnstream.workflow.name": event.data.workflow,
            "turnstream.workflow.run_id": run_id,
            "turnstream.workflow.status": event.data.status,
        }
        if event.data.failure is not None:
            attributes["error.type"] = event.data.failure
        span = self.derived_span(
            f"run_workflow {event.data.workflow}",
            event.trace_id,
            run_span_id(run_id),
            None,
            attributes,
            min(uuid7_time_ns(run_id) or end, end),
        )
        if event.data.status == "failed":
            span.set_status(Status(StatusCode.ERROR, event.data.reason))
        span.end(end_time=end)

    def derived_span(
        self,
        name: str,
        trace_id: str,
        span_id: int,
        parent: Context | None,
        attributes: dict[str, Any],
        start: int,
    ) -> Span:
        """A span started at `start` whose id is `span_id` (children elsewhere derive it),
        a root of the trace `trace_id` unless it has a `parent`."""
        token = _fixed_ids.set((trace_id_of(trace_id), span_id))
        try:
            return self.tracer.start_span(
                name,
                context=parent or Context(),
                kind=SpanKind.INTERNAL,
                attributes=attributes,
                start_time=start,
            )
        finally:
            _fixed_ids.reset(token)

    # gateway

    def accepted(self, events: Sequence[EventBase]) -> None:
        for event in events:
            if isinstance(event, TurnEnded) and event.turn_id is not None:
                self.end_turn(event, event.turn_id, None)  # rejected: its turn ends here
            match event:
                case InputAccepted(turn_id=str(turn_id)):
                    parent, origin = self.turn_context(event.trace_id, turn_id), turn_id
                    attributes = {"turnstream.turn.id": turn_id}
                case WorkflowAttached():
                    origin = event.data.run_id
                    parent = self.run_context(event.trace_id, origin)
                    attributes = {"turnstream.workflow.run_id": origin}
                case _:
                    continue
            end = ns_of(event.time)  # decided; the runner may take it from there at once
            span = self.tracer.start_span(
                "accept_input",
                context=parent,
                kind=SpanKind.CONSUMER,
                attributes={
                    "gen_ai.conversation.id": event.session_id,
                    "turnstream.sender.kind": event.data.sender.kind,
                    **attributes,
                },
                start_time=min(uuid7_time_ns(origin) or end, end),
            )
            span.end(end_time=end)

    # audit

    def audited(self, msgs: Sequence[Any]) -> None:
        otel_spans.audited(self.tracer, self.parent_of, msgs)

    # approval

    def approval_waits(
        self, state: ApprovalState, item: object, events: Sequence[EventBase]
    ) -> None:
        proposals = {p.invocation_id: p.event for p in state.proposals}
        headers: Mapping[str, str] | None = None
        if isinstance(item, Delivered) and isinstance(item.event, ToolInvocationProposed):
            proposals[item.event.data.invocation_id] = item.event
            headers = item.msg.headers
        self.verdict_spans(events, proposals, state.mode, headers)

    def verdict_spans(
        self,
        events: Sequence[EventBase],
        proposals: Mapping[str, ToolInvocationProposed],
        mode: str | None,
        headers: Mapping[str, str] | None,
    ) -> None:
        """An `await_approval` span from each proposal to its verdict in `events`."""
        otel_spans.verdict_spans(self.tracer, self.parent_of, events, proposals, mode, headers)
