"""Traces across real service processes: gateway, turn-runner, approval, tool-executor and
audit each run as their own process with their own tracer provider, exporting OTLP/HTTP to
a receiver in this test (a real HTTP server decoding the protobuf requests)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tests.recovery.harness import ROOT, Deployment, deployment, wait_for
from tests.telemetry.receiver import Point, Span, otlp_receiver
from turnstream.bus import Bus
from turnstream.client import answer_command, attach_command, message_command, publish_command
from turnstream.core.events import (
    InteractionRequested,
    ToolInvocationFailed,
    TurnEnded,
    WorkflowExit,
)

pytestmark = pytest.mark.e2e

SECRET_INPUT = "please read notes.txt SECRET-INPUT-7f3a"
SECRET_FILE = "SECRET-FILE-CONTENT-91c2"
SCRIPT = """
replies:
  - tool_calls: [{name: read_file, arguments: {path: notes.txt}}]
  - text: "The notes say {last_tool_result:40}"
  - text: "second turn: {input:20}"
"""
CONTENT_KEYS = {
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
}
OTEL_ENV = {
    "OTEL_BSP_SCHEDULE_DELAY": "100",
    "OTEL_METRIC_EXPORT_INTERVAL": "500",
}
ALL_SPANS = 7 + 4 + 2
"""The tool turn's invoke_agent, accept_input, chat ×2, await_approval, execute_tool,
audit_turn; the text turn's invoke_agent, accept_input, chat, audit_turn; the rejected
input's invoke_agent and audit_turn."""
REJECTED = "otel-rejected"


HEADERS_OF = ("ToolInvocationProposed", "ToolInvocationRequested", "ToolInvocationSucceeded")


def start_audit(d: Deployment) -> subprocess.Popen[bytes]:
    with open(d.root / "audit.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "turnstream.audit"], env=d.env, stdout=log, stderr=log, cwd=ROOT
        )


@asynccontextmanager
async def audit_process(d: Deployment, bus: Bus) -> AsyncIterator[None]:
    """The audit service as one more process of the deployment, consuming; stopped (and so
    flushed) on exit."""
    audit = start_audit(d)
    try:
        async with asyncio.timeout(60):
            while True:
                try:
                    info = await bus.js.consumer_info(bus.subjects.log_stream, "audit")
                    if info.num_waiting:  # its pull durable asks for events
                        break
                except Exception:
                    pass
                await asyncio.sleep(0.1)
        yield
    finally:
        audit.send_signal(signal.SIGTERM)
        try:
            audit.wait(timeout=15)
        except subprocess.TimeoutExpired:
            audit.kill()
            audit.wait()


async def run_two_turns(
    tmp_path: Path, session: str, **env: str
) -> tuple[list[TurnEnded], list[Span], list[Point], dict[str, str]]:
    """A tool turn and a text turn in one session (and an input the gateway rejects, in
    another), every service a process exporting to an in-test receiver; the turns' ends,
    every span and metric point received, and the `traceparent` header each of
    `HEADERS_OF` was stored with."""
    with otlp_receiver() as (endpoint, received):
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, **OTEL_ENV, **env}
        async with deployment(tmp_path, SCRIPT, **env) as (d, bus), audit_process(d, bus):
            (d.root / "workspace" / "notes.txt").write_text(SECRET_FILE)
            await publish_command(bus, session, message_command(session, SECRET_INPUT))
            await wait_for(bus, session, "TurnEnded")
            await publish_command(bus, session, message_command(session, "again"))
            ended = await wait_for(bus, session, "TurnEnded", count=2)
            stored = [
                await bus.js.get_last_msg(bus.subjects.log_stream, bus.subjects.log(session, kind))
                for kind in HEADERS_OF
            ]
            await publish_command(bus, REJECTED, b"{not json", idempotency_key="bad-1")
            [rejected] = await wait_for(bus, REJECTED, "TurnEnded")
            assert isinstance(rejected, TurnEnded)
            headers = {
                k: (m.headers or {}).get("traceparent", "")
                for k, m in zip(HEADERS_OF, stored, strict=True)
            }
            received.wait(lambda spans: len(spans) >= ALL_SPANS)
        # the services stopped: each flushed its spans and metrics on the way out
        spans = received.wait(lambda spans: len(spans) >= ALL_SPANS, timeout=10)
        _, points = received.snapshot()
    turns = [e for e in ended if isinstance(e, TurnEnded)] + [rejected]
    return turns, spans, points, headers


def by_name(spans: list[Span], prefix: str) -> list[Span]:
    return [s for s in spans if s.name.startswith(prefix)]


async def test_one_trace_per_turn_with_the_genai_tree_and_no_content(tmp_path: Path) -> None:
    session = "otel-tree"
    (*ended, rejected), spans, points, headers = await run_two_turns(tmp_path, session)
    assert [e.data.status for e in ended] == ["completed", "completed"]

    # one trace per turn, whose id is the envelope's traceId (a UUIDv7: its 32 hex digits)
    traces = {uuid.UUID(e.trace_id).hex: e for e in ended}
    assert len(traces) == 2
    rejected_trace = uuid.UUID(rejected.trace_id).hex
    assert {s.trace_id for s in spans} == {*traces, rejected_trace}
    tool_trace = uuid.UUID(ended[0].trace_id).hex
    text_trace = uuid.UUID(ended[1].trace_id).hex
    tool_turn = [s for s in spans if s.trace_id == tool_trace]
    text_turn = [s for s in spans if s.trace_id == text_trace]
    assert Counter(s.name for s in tool_turn) == {
        "invoke_agent turnstream": 1,
        "accept_input": 1,
        "chat demo": 2,
        "await_approval read_file": 1,
        "execute_tool read_file": 1,
        "audit_turn": 1,
    }
    assert Counter(s.name for s in text_turn) == {
        "invoke_agent turnstream": 1,
        "accept_input": 1,
        "chat demo": 1,
        "audit_turn": 1,
    }

    # the tree: one root per trace, every other span its child, each from its own process
    [root] = [s for s in tool_turn if not s.parent_id]
    assert root.name == "invoke_agent turnstream"
    assert all(s.parent_id == root.span_id for s in tool_turn if s is not root)
    services = {s.name.split(" ")[0]: s.service for s in tool_turn}
    assert services == {
        "invoke_agent": "turnstream-turn-runner",
        "accept_input": "turnstream-gateway",
        "chat": "turnstream-turn-runner",
        "await_approval": "turnstream-turn-runner",  # auto: the runner applies the rules
        "execute_tool": "turnstream-tool-executor",
        "audit_turn": "turnstream-audit",
    }
    [audit] = by_name(tool_turn, "audit_turn")
    assert audit.start_ns == root.end_ns  # the audit records the turn's end, after it
    for child in tool_turn:
        if child is not audit:
            assert root.start_ns <= child.start_ns and child.end_ns <= root.end_ns, child.name
    [tool] = by_name(tool_turn, "execute_tool")
    [approval] = by_name(tool_turn, "await_approval")
    assert approval.end_ns <= tool.start_ns

    # an input the gateway rejects: its turn ends there, as one root span saying why
    [bad] = [s for s in spans if s.trace_id == rejected_trace and not s.parent_id]
    assert (bad.name, bad.service, bad.parent_id) == (root.name, "turnstream-gateway", "")
    assert bad.attributes["error.type"] == "invalid_input"
    assert bad.status_code == 2  # ERROR

    # W3C traceparent on the messages that set another service to work: the runner's
    # proposal and request name the turn's span; the executor's result, its own span
    assert headers["ToolInvocationProposed"] == f"00-{tool_trace}-{root.span_id}-01"
    assert headers["ToolInvocationRequested"] == f"00-{tool_trace}-{root.span_id}-01"
    assert headers["ToolInvocationSucceeded"] == f"00-{tool_trace}-{tool.span_id}-01"

    # the attributes of the conventions
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.agent.name"] == "turnstream"
    assert root.attributes["gen_ai.conversation.id"] == session
    assert root.attributes["turnstream.turn.id"] == ended[0].turn_id
    assert root.attributes["gen_ai.usage.output_tokens"] >= 1
    first_chat, second_chat = sorted(by_name(tool_turn, "chat"), key=lambda s: s.start_ns)
    for chat in (first_chat, second_chat):
        assert chat.kind == 3  # CLIENT
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.provider.name"] == "scripted"
        assert chat.attributes["gen_ai.request.model"] == "demo"
        assert chat.attributes["gen_ai.conversation.id"] == session
        assert chat.attributes["gen_ai.usage.input_tokens"] >= 1
        assert chat.attributes["gen_ai.usage.output_tokens"] >= 0
    assert first_chat.attributes["gen_ai.response.finish_reasons"] == ["tool_use"]
    assert second_chat.attributes["gen_ai.response.finish_reasons"] == ["end_turn"]
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "read_file"
    assert tool.attributes["gen_ai.tool.call.id"].startswith("call_")
    assert tool.attributes["gen_ai.conversation.id"] == session
    assert approval.attributes["gen_ai.tool.call.id"] == tool.attributes["gen_ai.tool.call.id"]
    assert approval.attributes["turnstream.approval.decision"] == "approved"
    assert approval.attributes["turnstream.approval.authority"] == "mode"
    assert approval.attributes["turnstream.approval.mode"] == "auto"

    # no message content by default
    for span in spans:
        assert not CONTENT_KEYS & span.attributes.keys(), span.name
        values = repr(span.attributes)
        assert "SECRET" not in values, span.name

    # metrics: the two GenAI client histograms, from the runner
    usage = [p for p in points if p.metric == "gen_ai.client.token.usage"]
    assert {p.attributes["gen_ai.token.type"] for p in usage} == {"input", "output"}
    assert all(p.attributes["gen_ai.request.model"] == "demo" for p in usage)
    duration = [p for p in points if p.metric == "gen_ai.client.operation.duration"]
    assert duration and all(p.service == "turnstream-turn-runner" for p in duration)
    assert max(p.count for p in duration) == 3  # three model calls, cumulative


async def test_message_content_only_when_capture_is_on(tmp_path: Path) -> None:
    _, spans, _, _ = await run_two_turns(
        tmp_path, "otel-content", OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true"
    )
    first_chat, second_chat = sorted(by_name(spans, "chat"), key=lambda s: s.start_ns)[:2]
    assert SECRET_INPUT in first_chat.attributes["gen_ai.input.messages"]
    assert "read_file" in first_chat.attributes["gen_ai.output.messages"]
    assert SECRET_FILE in second_chat.attributes["gen_ai.input.messages"]
    assert SECRET_FILE in second_chat.attributes["gen_ai.output.messages"]
    [tool] = by_name(spans, "execute_tool")
    assert "notes.txt" in tool.attributes["gen_ai.tool.call.arguments"]
    assert SECRET_FILE in tool.attributes["gen_ai.tool.call.result"]
    roots = by_name(spans, "invoke_agent")
    assert any(SECRET_INPUT in s.attributes.get("gen_ai.input.messages", "") for s in roots)


async def test_a_human_approval_and_a_failed_tool_in_the_trace(tmp_path: Path) -> None:
    session = "otel-ask"
    script = """
replies:
  - tool_calls: [{name: read_file, arguments: {path: missing.txt}}]
  - text: "there is no such file"
"""
    with otlp_receiver() as (endpoint, received):
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, **OTEL_ENV}
        async with deployment(tmp_path, script, TURNSTREAM_SECURITY_MODE="ask", **env) as (
            _,
            bus,
        ):
            await publish_command(bus, session, message_command(session, "read it"))
            [asked] = await wait_for(bus, session, "InteractionRequested")
            assert isinstance(asked, InteractionRequested)
            await asyncio.sleep(0.3)  # the human takes a moment
            answer = answer_command(session, asked.data.interaction_id, "approve")
            await publish_command(bus, session, answer)
            [ended] = await wait_for(bus, session, "TurnEnded")
            [failed] = await wait_for(bus, session, "ToolInvocationFailed")
            assert isinstance(ended, TurnEnded) and isinstance(failed, ToolInvocationFailed)
            wanted = {"invoke_agent", "await_approval", "execute_tool"}
            spans = received.wait(lambda spans: wanted <= {s.name.split()[0] for s in spans})
    trace = uuid.UUID(ended.trace_id).hex
    [root] = [s for s in spans if s.trace_id == trace and not s.parent_id]
    [approval] = by_name(spans, "await_approval")
    [tool] = by_name(spans, "execute_tool")
    assert approval.parent_id == tool.parent_id == root.span_id
    assert approval.attributes["turnstream.approval.authority"] == "interaction"
    assert approval.attributes["turnstream.approval.mode"] == "ask"
    assert approval.attributes["turnstream.approval.decision"] == "approved"
    assert approval.end_ns - approval.start_ns >= 300_000_000  # the wait for the human
    assert tool.status_code == 2  # ERROR
    assert tool.attributes["error.type"] == failed.data.error.kind
    assert root.attributes["turnstream.turn.status"] == ended.data.status == "completed"


async def test_a_workflow_run_is_one_trace_with_its_stage_turns_under_it(tmp_path: Path) -> None:
    session = "otel-workflow"
    demo = (ROOT / "services" / "turnstream" / "providers" / "demo.yaml").read_text()
    with otlp_receiver() as (endpoint, received):
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "TURNSTREAM_WORKFLOWS": str(ROOT / "workflows"),
            "TURNSTREAM_SECURITY_MODE": "ask",
            **OTEL_ENV,
        }
        async with deployment(tmp_path, demo, **env) as (_, bus):
            command = attach_command(session, "review-and-implement", {"task": "document it"})
            await publish_command(bus, session, command)
            [asked] = await wait_for(bus, session, "InteractionRequested")
            assert isinstance(asked, InteractionRequested)
            answer = answer_command(session, asked.data.interaction_id, "approve")
            await publish_command(bus, session, answer)
            [exit_] = await wait_for(bus, session, "WorkflowExit", timeout=90)
            stages = await wait_for(bus, session, "TurnEnded")
        # the services stopped: each flushed its spans on the way out
        spans = received.wait(lambda spans: any(s.name.startswith("run_") for s in spans))
    assert isinstance(exit_, WorkflowExit) and exit_.data.status == "completed"
    trace = uuid.UUID(exit_.trace_id).hex
    ours = [s for s in spans if s.trace_id == trace]
    [run] = [s for s in ours if not s.parent_id]  # one root: the run
    assert run.name == "run_workflow review-and-implement"
    assert run.attributes["turnstream.workflow.status"] == "completed"
    turns = by_name(ours, "invoke_agent")
    assert {s.attributes["turnstream.turn.id"] for s in turns} == {e.turn_id for e in stages}
    assert all(t.parent_id == run.span_id for t in turns)
    [accepted] = by_name(ours, "accept_input")
    assert accepted.parent_id == run.span_id
    by_id = {t.span_id: t for t in turns}
    for chat in by_name(ours, "chat"):
        assert chat.parent_id in by_id  # each model call under its stage's turn
    assert by_name(ours, "await_approval grep")[0].parent_id in by_id
