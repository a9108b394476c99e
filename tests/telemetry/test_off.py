"""Telemetry off costs nothing and changes nothing; the ids every process derives alike."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime

import pytest

from tests.telemetry.receiver import otlp_receiver
from turnstream.bus.tracing import msg_headers, set_header_hook
from turnstream.core.events import TurnEnded, TurnEndedData
from turnstream.core.ids import derived_uuid7
from turnstream.runtime import telemetry, trace_ids

TRACE = derived_uuid7(1_763_900_000_000, "inbound:1:trace")
TURN = derived_uuid7(1_763_900_000_000, "inbound:1:turn")


def ended(trace_id: str = TRACE, turn_id: str | None = TURN) -> TurnEnded:
    return TurnEnded(
        id=derived_uuid7(1_763_900_000_001, "end"),
        time=datetime(2026, 11, 23, tzinfo=UTC),
        session_id="s1",
        chat_id="c1",
        turn_id=turn_id,
        trace_id=trace_id,
        correlation_id="k1",
        source="test",
        data=TurnEndedData(status="completed"),
    )


def test_off_imports_no_opentelemetry_and_the_hooks_are_identities() -> None:
    probe = """
import sys
from turnstream.gateway import app as gateway
from turnstream.turn_runner import app as runner
from turnstream.approval import app as approval
from turnstream.tool_executor import app as executor
from turnstream.runtime import telemetry
from turnstream.providers import ScriptedProvider, load_script
assert telemetry.setup("probe") is False and not telemetry.enabled()
provider = ScriptedProvider(load_script(None))
assert telemetry.traced(provider) is provider
prefixes = ("opentelemetry", "turnstream.runtime.otel")
loaded = sorted(m for m in sys.modules if m.startswith(prefixes))
assert not loaded, loaded
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr


def test_without_telemetry_an_event_is_appended_with_its_id_alone() -> None:
    assert msg_headers(ended()) == {"Nats-Msg-Id": ended().id}


def test_a_header_hook_adds_headers_but_never_replaces_the_id() -> None:
    set_header_hook(lambda event: {"traceparent": "00-x", "Nats-Msg-Id": "forged"})
    try:
        assert msg_headers(ended()) == {"traceparent": "00-x", "Nats-Msg-Id": ended().id}
    finally:
        set_header_hook(None)


def test_the_trace_id_is_the_uuid_trace_id_and_any_other_string_hashes_alike() -> None:
    assert f"{trace_ids.trace_id_of(TRACE):032x}" == uuid.UUID(TRACE).hex
    other = trace_ids.trace_id_of("not-a-uuid")
    assert other == trace_ids.trace_id_of("not-a-uuid") != trace_ids.trace_id_of("not-a-uuid2")
    assert 0 < other < 2**128
    span = trace_ids.turn_span_id(TURN)
    assert span == trace_ids.turn_span_id(TURN) != trace_ids.turn_span_id(TRACE)
    assert 0 < span < 2**64
    assert trace_ids.uuid7_time_ns(TURN) == 1_763_900_000_000 * 1_000_000
    assert trace_ids.uuid7_time_ns("s1") is None


def test_on_an_appended_event_carries_its_turns_traceparent() -> None:
    with otlp_receiver() as (endpoint, _):
        assert telemetry.setup("test", {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint})
        try:
            assert telemetry.setup("test", {})  # once per process
            headers = msg_headers(ended())
            assert headers["traceparent"] == (
                f"00-{uuid.UUID(TRACE).hex}-{trace_ids.turn_span_id(TURN):016x}-01"
            )
            assert "traceparent" not in msg_headers(ended(turn_id=None))  # no turn, no span
        finally:
            telemetry.shutdown()
    assert not telemetry.enabled()
    assert msg_headers(ended()) == {"Nats-Msg-Id": ended().id}


def test_a_trace_id_ratio_sampler_decides_a_turn_alike_in_every_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # each process derives the trace id from the event, and the ratio sampler decides by
    # trace id alone: the header says what every process decides for the turn's root
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0")
    with otlp_receiver() as (endpoint, _):
        assert telemetry.setup("test", {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint})
        try:
            assert msg_headers(ended())["traceparent"].endswith("-00")  # not sampled
        finally:
            telemetry.shutdown()


def test_a_failing_hook_is_logged_and_never_breaks_the_service(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def boom(*_: object) -> None:
        raise RuntimeError("boom")

    with otlp_receiver() as (endpoint, _):
        assert telemetry.setup("test", {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint})
        try:
            active = telemetry._active
            monkeypatch.setattr(active, "turn_events", boom)
            monkeypatch.setattr(active, "_headers", boom)
            telemetry.turn_events([ended()])
            assert msg_headers(ended()) == {"Nats-Msg-Id": ended().id}  # appended untraced
        finally:
            telemetry.shutdown()
    assert "telemetry hook turn_events failed" in caplog.text
    assert "no traceparent for TurnEnded" in caplog.text


async def test_a_chat_span_names_the_model_asked_for_and_the_one_that_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An LLM interceptor's model (`request.model`) is the requested one; a call the
    fallback model answered says so in `gen_ai.response.model`."""
    from dataclasses import replace

    from tests.unit.factories import failure, success
    from turnstream.core.turn import Message, ProviderRequest
    from turnstream.core.turn.provider import Fallback

    class Answering:
        name, model = "anthropic", "claude-big"

        async def complete(self, request, on_delta, on_tool_call=None):  # type: ignore[no-untyped-def]
            switch = Fallback("anthropic/claude-big", "openai/gpt-small", failure())
            return replace(success("hi"), fallback=switch)

        async def close(self) -> None:
            pass

    request = ProviderRequest("s1", TURN, 1, 0, None, (Message("user", "hi"),), model="claude-mid")
    with otlp_receiver() as (endpoint, received):
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)  # the exporter reads it
        assert telemetry.setup("test", {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint})
        try:
            await telemetry.traced(Answering()).complete(request, _no_delta)
        finally:
            telemetry.shutdown()
        spans = received.wait(lambda s: any(x.name.startswith("chat") for x in s))
    (chat,) = [s for s in spans if s.name.startswith("chat")]
    assert chat.name == "chat claude-mid"
    assert chat.attributes["gen_ai.request.model"] == "claude-mid"
    assert chat.attributes["gen_ai.response.model"] == "gpt-small"


async def _no_delta(_: str) -> None:
    pass
