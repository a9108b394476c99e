"""The wire contract: every event kind round-trips; the committed schemas match the models."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.unit.factories import T0
from turnstream.core.commands import COMMAND_ADAPTER
from turnstream.core.events import EVENT_TYPES, SCHEMA_VERSION, StagePreFired, decode, encode
from turnstream.core.ids import derived_uuid7
from turnstream.core.schemas import exported_schemas

ENVELOPE = {
    "id": "01a20000-0000-7000-8000-000000000001",
    "time": T0.isoformat(),
    "sessionId": "s1",
    "chatId": "c1",
    "turnId": "t1",
    "traceId": "tr1",
    "correlationId": "k1",
    "causationId": "c0",
    "source": "test/1",
}
SENDER = {"kind": "agent", "id": "planner"}
SAMPLE_DATA = {
    "InputAccepted": {
        "kind": "message",
        "text": "hi",
        "sender": SENDER,
        "idempotencyKey": "k1",
        "replyTo": "s2",
        "inboundSeq": 4,
    },
    "InputRejected": {
        "kind": "schema",
        "reason": "r",
        "errors": ["text: missing"],
        "inboundSeq": 5,
        "size": 10,
        "excerpt": "{}",
    },
    "SteeringInjected": {"inputId": "i", "text": "t"},
    "FollowUpQueued": {"inputId": "i", "behindTurnId": "t0"},
    "InterruptReceived": {
        "mode": "hard",
        "sender": SENDER,
        "idempotencyKey": "k",
        "inboundSeq": 1,
    },
    "SessionTurnStart": {"inputId": "i", "text": "hi", "sender": SENDER},
    "StagePreFired": {"stage": "COMPOSE_REQUEST", "iteration": 1},
    "StagePostFired": {"stage": "RENDER", "iteration": 1, "outcome": "ok"},
    "RenderEmitted": {"text": "hello", "replyTo": "s2"},
    "TurnEnded": {
        "status": "failed",
        "failureClass": "limit_exceeded",
        "reason": "r",
        "nextAction": "n",
        "iterations": 50,
    },
    "SessionTurnEnd": {"status": "completed"},
    "ProviderRequestStarted": {
        "provider": "scripted",
        "model": "demo",
        "iteration": 1,
        "callIndex": 0,
        "messageCount": 1,
    },
    "ProviderRequestCompleted": {
        "message": {"role": "assistant", "content": [{"type": "text", "text": "hi"}]},
        "usage": {"inputTokens": 1, "outputTokens": 2},
        "stopReason": "end_turn",
        "iteration": 1,
    },
    "ProviderRequestFailed": {
        "errorClass": "overloaded",
        "message": "m",
        "retryable": True,
        "statusCode": 529,
        "iteration": 1,
    },
    "ProviderRetry": {"attempt": 1, "delayMs": 500, "errorClass": "rate_limit", "message": "m"},
    "ContextProvided": {
        "provider": "agents_md",
        "tokens": 3,
        "digest": "sha256:00",
        "content": "Use tabs.",
        "iteration": 1,
    },
    "ContextSkipped": {"provider": "slow", "reason": "timeout", "timedOut": True, "iteration": 1},
    "ProviderFallback": {
        "from": "anthropic/claude-sonnet-4-6",
        "to": "openai/gpt-4o-mini",
        "reason": "overloaded: HTTP 529: Overloaded",
        "errorClass": "overloaded",
        "attempts": 4,
        "iteration": 1,
    },
    "ContextCompacted": {"droppedMessages": 4, "tokensBefore": 900, "tokensAfter": 300},
    "ToolInvocationProposed": {
        "invocationId": "i1",
        "callId": "c1",
        "tool": "read_file",
        "args": {"path": "README.md"},
        "index": 0,
        "iteration": 1,
        "readOnly": True,
    },
    "ToolCallModeInvoked": {"invocationId": "i1", "mode": "ask", "verdict": "ask"},
    "ToolCallApproved": {"invocationId": "i1", "authority": "interaction", "answeredBy": SENDER},
    "ToolCallDenied": {
        "invocationId": "i1",
        "authority": "interaction",
        "reason": "no answer by the deadline",
        "timedOut": True,
    },
    "InteractionRequested": {
        "interactionId": "q1",
        "invocationId": "i1",
        "tool": "write_file",
        "args": {"path": "a", "content": "b"},
        "deadline": T0.isoformat(),
        "prompt": "allow write_file?",
    },
    "InteractionAnswered": {
        "interactionId": "q1",
        "decision": "approve",
        "sender": SENDER,
        "idempotencyKey": "k2",
        "inboundSeq": 9,
    },
    "ToolInvocationRequested": {
        "invocationId": "i1",
        "callId": "c1",
        "tool": "read_file",
        "args": {"path": "README.md"},
        "readOnly": True,
        "idempotent": True,
        "timeoutMs": 30000,
        "iteration": 1,
    },
    "ToolInvocationStarted": {"invocationId": "i1", "attempt": 1},
    "ToolInvocationSucceeded": {
        "invocationId": "i1",
        "output": "# turnstream…",
        "truncated": True,
        "size": 90000,
        "blob": "i1",
        "durationMs": 1.5,
    },
    "ToolInvocationFailed": {
        "invocationId": "i1",
        "error": {"class": "tool_runtime_error", "kind": "path_escape", "detail": "../x"},
        "mayHaveRun": False,
        "durationMs": 0.2,
    },
    "ToolInvocationCancelled": {"invocationId": "i1", "reason": "turn aborted"},
    "HookDecided": {
        "hook": "no-secrets",
        "kind": "guard",
        "stage": "TOOL_CALL",
        "point": "pre",
        "action": "deny_tool",
        "reason": "path matches .env",
        "invocationId": "i1",
    },
    "WorkflowAttached": {
        "runId": "r1",
        "workflow": "review",
        "definition": {"name": "review", "steps": [], "stages": {}},
        "ctx": {"task": "fix the bug"},
        "sender": {"kind": "human", "id": "u1"},
        "idempotencyKey": "k9",
        "inboundSeq": 9,
    },
    "StageEntered": {
        "runId": "r1",
        "stage": "plan",
        "stageExecutionId": "x1",
        "step": 0,
        "system": "You plan.",
        "upstream": [{"stage": "intake", "verdict": "ok", "output": {"summary": "s"}}],
    },
    "StageInitFailed": {
        "runId": "r1",
        "stage": "plan",
        "stageExecutionId": "x1",
        "step": 0,
        "reason": "upstream[0] (intake): (root): 'summary' is a required property",
    },
    "StageCheckGateResult": {"stage": "plan", "stageExecutionId": "x1", "outcome": "pass"},
    "StageCompletionChecked": {
        "stage": "plan",
        "stageExecutionId": "x1",
        "iteration": 2,
        "outcome": "invalid",
        "callIds": ["c1"],
        "detail": "steps: 'steps' is a required property",
    },
    "StageAssertOutcome": {
        "stage": "plan",
        "stageExecutionId": "x1",
        "verdict": "retry",
        "attempt": 1,
        "reason": "too vague",
    },
    "StageGranted": {
        "stage": "plan",
        "stageExecutionId": "x1",
        "tool": "write_file",
        "invocationId": "i1",
    },
    "StageCancelled": {
        "stage": "review-b",
        "stageExecutionId": "x2",
        "reason": "sibling review-a failed",
        "cause": "ParallelSiblingFailure",
    },
    "StageExited": {
        "stage": "plan",
        "stageExecutionId": "x1",
        "result": {"stage": "plan", "verdict": "ok", "parsed": {"summary": "s"}},
    },
    "WorkflowExit": {"runId": "r1", "workflow": "review", "status": "completed"},
    "AuditViolation": {
        "kind": "unapproved_tool_run",
        "detail": "ToolInvocationStarted for i1 without a ToolCallApproved",
        "eventId": "e9",
        "eventSeq": 42,
        "invocationId": "i1",
    },
    "PushNotificationAbandoned": {
        "taskId": "t1",
        "configId": "c1",
        "webhook": "https://example.com/hook",
        "updateSeq": 42,
        "attempts": 5,
        "error": "HTTP 503",
    },
    "SessionConfigured": {
        "agent": "researcher",
        "tools": ["read_file"],
        "securityMode": "auto",
        "maxIterations": 10,
        "systemPrompt": "You research.",
        "idempotencyKey": "k1",
    },
    "MessageSent": {
        "to": "s2",
        "idempotencyKey": "reply:t1",
        "hops": 1,
        "cause": "replyTo",
        "inReplyTo": "k1",
    },
    "MessageDropped": {"to": "s2", "reason": "hop_limit", "hops": 9, "cause": "replyTo"},
    "SubTurnSpawned": {
        "invocationId": "i1",
        "childSessionId": "s1:sub-abc",
        "agent": "researcher",
        "mode": "sync",
        "depth": 1,
        "task": "read the README",
        "idempotencyKey": "spawn:i1",
        "deadlineS": 300.0,
    },
    "SubTurnEnded": {
        "invocationId": "i1",
        "childSessionId": "s1:sub-abc",
        "childTurnId": "t9",
        "status": "failed",
        "failureClass": "timeout",
        "reply": "",
    },
    "SubTurnResultDelivered": {
        "invocationId": "i1",
        "childSessionId": "s1:sub-abc",
        "as": "tool_result",
        "inputId": "e5",
    },
}


def test_every_event_kind_has_a_sample() -> None:
    assert set(SAMPLE_DATA) == set(EVENT_TYPES)


@pytest.mark.parametrize("kind", sorted(SAMPLE_DATA))
def test_event_round_trips_through_the_wire(kind: str) -> None:
    raw = orjson.dumps({**ENVELOPE, "type": kind, "data": SAMPLE_DATA[kind]})
    event = decode(raw)
    assert type(event) is EVENT_TYPES[kind]
    wire = orjson.loads(encode(event))
    assert wire["sessionId"] == "s1" and wire["type"] == kind
    assert wire["schemaVersion"] == SCHEMA_VERSION
    assert decode(encode(event)) == event


def test_a_version_1_event_is_read_as_it_was_written() -> None:
    raw = {**ENVELOPE, "type": "StagePreFired", "data": SAMPLE_DATA["StagePreFired"]}
    event = decode(orjson.dumps({**raw, "schemaVersion": 1}))
    assert isinstance(event, StagePreFired) and event.schema_version == 1
    assert event.data.previous is None and event.data.stage == "COMPOSE_REQUEST"


def test_a_stage_pre_fired_carries_the_stage_it_left() -> None:
    left = {"stage": "TOOL_CALL", "iteration": 1, "outcome": "ok", "endedAt": T0.isoformat()}
    data = {**SAMPLE_DATA["StagePreFired"], "iteration": 2, "previous": left}
    event = decode(orjson.dumps({**ENVELOPE, "type": "StagePreFired", "data": data}))
    assert isinstance(event, StagePreFired) and event.data.previous is not None
    assert event.data.previous.stage == "TOOL_CALL" and event.data.previous.ended_at == T0
    assert orjson.loads(encode(event))["data"]["previous"]["endedAt"]
    assert decode(encode(event)) == event


def test_unknown_fields_and_kinds_are_rejected() -> None:
    with pytest.raises(ValueError):
        decode(orjson.dumps({**ENVELOPE, "type": "Nope", "data": {}}))
    with pytest.raises(ValueError):
        data = {**SAMPLE_DATA["SessionTurnEnd"], "extra": 1}
        decode(orjson.dumps({**ENVELOPE, "type": "SessionTurnEnd", "data": data}))


def test_a_newer_schema_version_is_refused_with_a_clear_error() -> None:
    raw = {**ENVELOPE, "type": "SessionTurnEnd", "data": {"status": "completed"}}
    with pytest.raises(ValueError, match="upgrade turnstream"):
        decode(orjson.dumps({**raw, "schemaVersion": SCHEMA_VERSION + 1}))


def test_committed_schemas_match_a_fresh_export() -> None:
    folder = Path(__file__).parents[2] / "schemas"
    for name, content in exported_schemas().items():
        committed = (folder / name).read_bytes()
        assert committed == content, f"{name} is stale: run `turnstream schemas export`"


def test_inbound_schema_accepts_the_documented_example() -> None:
    example = {
        "type": "message",
        "sessionId": "s1",
        "chatId": "c1",
        "sender": {"kind": "human", "id": "u1"},
        "text": "hello",
        "idempotencyKey": "k1",
        "replyTo": None,
    }
    command = COMMAND_ADAPTER.validate_python(example)
    assert command.type == "message"
    import jsonschema

    schema = orjson.loads(exported_schemas()["inbound-command.schema.json"])
    jsonschema.validate(example, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**example, "sessionId": "bad id"}, schema)


def test_derived_ids_are_valid_uuid7_and_stable() -> None:
    import uuid

    a = derived_uuid7(1_700_000_000_000, "TS_INBOUND:7:event")
    assert a == derived_uuid7(1_700_000_000_000, "TS_INBOUND:7:event")
    assert a != derived_uuid7(1_700_000_000_000, "TS_INBOUND:8:event")
    parsed = uuid.UUID(a)
    assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
    assert int(a.replace("-", "")[:12], 16) == 1_700_000_000_000
