"""Spans of the audit and of approval verdicts, as `Telemetry` (`runtime.otel`) makes them
for the services' hooks: each from the events it is about, parented by `parent_of`."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Tracer

from turnstream.core.events import (
    EventBase,
    ToolCallApproved,
    ToolCallDenied,
    ToolCallModeInvoked,
    ToolInvocationProposed,
    TurnEnded,
    decode,
)
from turnstream.runtime.otel_genai import ns_of

ParentOf = Callable[[EventBase, Mapping[str, str] | None], Context | None]
"""`Telemetry.parent_of`: the context an event's span is a child of."""


def audited(tracer: Tracer, parent_of: ParentOf, msgs: Sequence[Any]) -> None:
    """An `audit_turn` span for each `TurnEnded` among `msgs` the audit has checked."""
    end = time.time_ns()
    for msg in msgs:
        if not msg.subject.endswith(".TurnEnded"):
            continue
        try:
            event = decode(msg.data)
        except ValueError:
            continue
        if not isinstance(event, TurnEnded) or event.turn_id is None:
            continue
        span = tracer.start_span(
            "audit_turn",
            context=parent_of(event, msg.headers),
            kind=SpanKind.CONSUMER,
            attributes={
                "gen_ai.conversation.id": event.session_id,
                "turnstream.turn.id": event.turn_id,
                "turnstream.turn.status": event.data.status,
            },
            start_time=min(ns_of(event.time), end),
        )
        span.end(end_time=end)


def verdict_spans(
    tracer: Tracer,
    parent_of: ParentOf,
    events: Sequence[EventBase],
    proposals: Mapping[str, ToolInvocationProposed],
    mode: str | None,
    headers: Mapping[str, str] | None,
) -> None:
    """An `await_approval` span from each proposal to its verdict in `events` (the
    runner's verdicts, or the approval service's)."""
    verdicts = [e for e in events if isinstance(e, ToolCallApproved | ToolCallDenied)]
    if not verdicts:
        return
    modes = {
        e.data.invocation_id: e.data.mode for e in events if isinstance(e, ToolCallModeInvoked)
    }
    for verdict in verdicts:
        proposal = proposals.get(verdict.data.invocation_id)
        if proposal is None:
            continue
        tool = proposal.data.tool
        approved = isinstance(verdict, ToolCallApproved)
        span = tracer.start_span(
            f"await_approval {tool}",
            context=parent_of(proposal, headers),
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.conversation.id": proposal.session_id,
                "gen_ai.tool.name": tool,
                "gen_ai.tool.call.id": proposal.data.call_id,
                "turnstream.invocation.id": proposal.data.invocation_id,
                "turnstream.approval.decision": "approved" if approved else "denied",
                "turnstream.approval.authority": verdict.data.authority,
                "turnstream.approval.mode": modes.get(proposal.data.invocation_id) or mode or "",
                "turnstream.approval.timed_out": isinstance(verdict, ToolCallDenied)
                and verdict.data.timed_out,
            },
            start_time=ns_of(proposal.time),
        )
        span.end(end_time=max(ns_of(verdict.time), ns_of(proposal.time)))
