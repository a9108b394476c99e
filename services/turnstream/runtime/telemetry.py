"""OpenTelemetry traces and metrics of turns, after the GenAI semantic conventions.

Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` is set: `setup` then returns without importing
OpenTelemetry, and every hook below is one `None` test. On, each service process exports
OTLP/HTTP to that endpoint (the standard `OTEL_*` variables tune the exporters), and one
turn is one trace across the processes:

    invoke_agent <agent>            turn-runner   the turn, SessionTurnStart … TurnEnded
    ├── accept_input                gateway       inbound stored → InputAccepted
    ├── chat <model>                turn-runner   each provider call
    ├── await_approval <tool>       turn-runner   ToolInvocationProposed → verdict
                                    (approval: a verdict a person gave)
    ├── execute_tool <tool>         tool-executor each tool run
    └── audit_turn                  audit         TurnEnded → its summary written

The trace id is the envelope's `traceId`: the gateway makes it a UUIDv7, whose 128 bits
are the W3C trace id (32 hex digits, the UUID without dashes); any other string is hashed
to 128 bits (BLAKE2b), so every process derives the same id from the event alone. The
`invoke_agent` span's id is likewise derived from the turn id (`runtime/trace_ids.py`): a
turn can span runner restarts, so its span is emitted whole when the turn ends (started at the
turn id's UUIDv7 time, when the inbound message was stored), and every other span names
it as parent without waiting for it. Events appended while tracing carry a W3C
`traceparent` header (`turnstream.bus.tracing`): the span that appended them, else the
turn's span; the executor and the approval service continue from that header.

Message content (prompts, replies, tool arguments and results) is recorded only when
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from turnstream.bus.full import ALARM
from turnstream.bus.tracing import set_header_hook
from turnstream.core.approval import ApprovalState
from turnstream.core.events import EventBase, ToolInvocationRequested
from turnstream.core.turn import ProviderOutcome, ProviderRequest

if TYPE_CHECKING:
    from turnstream.providers import Provider
    from turnstream.providers.base import DeltaSink, ToolCallSink
    from turnstream.runtime.otel import Telemetry

log = logging.getLogger("turnstream.telemetry")
ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_active: Telemetry | None = None
"""The process's telemetry; None when off (every hook returns at once)."""


# --- setup -----------------------------------------------------------------------------


def setup(service: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Turn telemetry on for this process if `OTEL_EXPORTER_OTLP_ENDPOINT` is set (True);
    else do nothing at all (False). Idempotent."""
    global _active
    if _active is not None:
        return True
    if not environ.get(ENDPOINT_ENV):
        return False
    try:
        from turnstream.runtime.otel import Telemetry
    except ImportError as exc:  # the `otel` extra is not installed: say so, run untraced
        log.error(
            "%s is set but OpenTelemetry is not installed (%s): pip install 'turnstream[otel]'"
            "; running without telemetry",
            ENDPOINT_ENV,
            exc,
        )
        return False
    capture = environ.get(CAPTURE_ENV, "").strip().lower() == "true"
    _active = Telemetry(service, capture, environ)
    set_header_hook(_active.headers)
    ALARM.hook = _active.storage_refusal
    log.info("telemetry: OTLP export to %s (content %s)", environ[ENDPOINT_ENV], capture)
    return True


def shutdown() -> None:
    """Flush what is buffered and turn telemetry off (at process exit)."""
    global _active
    if _active is None:
        return
    set_header_hook(None)
    ALARM.hook = None
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
        with _guard("turn_events"):
            _active.turn_events(events)


def accepted(events: Sequence[EventBase]) -> None:
    """gateway: the events it just appended; an accepted input gets an `accept_input`, a
    rejected one (its turn ends at the gateway) its `invoke_agent`."""
    if _active is not None:
        with _guard("accepted"):
            _active.accepted(events)


def approval_waits(state: ApprovalState, item: object, events: Sequence[EventBase]) -> None:
    """approval: `events` decided from `state` (before them) and `item`; each verdict on a
    proposal gets an `await_approval` span from the proposal to the verdict."""
    if _active is not None:
        with _guard("approval_waits"):
            _active.approval_waits(state, item, events)


def audited(msgs: Sequence[Any]) -> None:
    """audit: log messages whose summaries and checks are written; each `TurnEnded` gets
    an `audit_turn` span (its turn's end → recorded)."""
    if _active is not None:
        with _guard("audited"):
            _active.audited(msgs)


@contextmanager
def _guard(hook: str) -> Iterator[None]:
    """Telemetry never breaks a turn: a hook that fails is logged, and the service goes on."""
    try:
        yield
    except Exception:
        log.exception("telemetry hook %s failed", hook)


_OFF: AbstractContextManager[None] = nullcontext()


def tool_span(request: ToolInvocationRequested, msg: Any) -> AbstractContextManager[None]:
    """tool-executor: the `execute_tool` span around running `request` (delivered as
    `msg`, whose `traceparent` header is its parent)."""
    return _OFF if _active is None else _active.genai.tool_span(request, msg)


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
        return await active.genai.chat(self.inner, request, on_delta, on_tool_call)

    async def close(self) -> None:
        await self.inner.close()
