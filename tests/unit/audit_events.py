"""Turn histories for the audit tests, built by hand (the audit reads any log)."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from typing import Any

from tests.unit.factories import T0
from turnstream.core.events import (
    EVENT_TYPES,
    Event,
    ProviderRequestCompleted,
    RenderEmitted,
    SessionTurnStart,
    ToolCallApproved,
    ToolInvocationRequested,
    ToolInvocationStarted,
    ToolInvocationSucceeded,
    TurnEnded,
)

_ids = itertools.count(1)


def event(
    kind: type[Any], session: str, turn: str | None, data: dict[str, Any], at: datetime = T0
) -> Event:
    assert kind in EVENT_TYPES.values()
    event: Event = kind.model_validate(
        {
            "id": f"ev{next(_ids):06d}",
            "time": at,
            "sessionId": session,
            "chatId": "c1",
            "turnId": turn,
            "traceId": f"trace-{turn}",
            "correlationId": f"key-{turn}",
            "source": "test/1",
            "data": data,
        }
    )
    return event


def start(session: str, turn: str, at: datetime = T0) -> Event:
    sender = {"kind": "human", "id": "u1"}
    return event(
        SessionTurnStart, session, turn, {"inputId": "i", "text": "hi", "sender": sender}, at
    )


def ended(
    session: str, turn: str, status: str = "completed", at: datetime = T0, **more: Any
) -> Event:
    return event(TurnEnded, session, turn, {"status": status, **more}, at)


def tool_run(session: str, turn: str, invocation: str, *, approved: bool = True) -> list[Event]:
    call = {
        "invocationId": invocation,
        "callId": "c",
        "tool": "read_file",
        "args": {"path": "a"},
        "readOnly": True,
        "idempotent": True,
        "timeoutMs": 1000,
        "iteration": 1,
    }
    out = [
        event(ToolCallApproved, session, turn, {"invocationId": invocation, "authority": "mode"})
    ]
    out = out if approved else []
    return [
        *out,
        event(ToolInvocationRequested, session, turn, call),
        event(ToolInvocationStarted, session, turn, {"invocationId": invocation}),
        event(
            ToolInvocationSucceeded,
            session,
            turn,
            {"invocationId": invocation, "output": "x", "size": 1, "durationMs": 1.0},
        ),
    ]


def turn(session: str, turn_id: str, *, reply: str = "hello", tools: int = 0) -> list[Event]:
    """A complete turn: start, a model call, `tools` approved tool runs, the reply, the end."""
    completed = {
        "message": {"role": "assistant", "content": [{"type": "text", "text": reply}]},
        "usage": {"inputTokens": 10, "outputTokens": 4},
        "stopReason": "end_turn",
        "iteration": 1,
    }
    events = [start(session, turn_id)]
    for n in range(tools):
        events += tool_run(session, turn_id, f"{turn_id}-inv{n}")
    events += [
        event(ProviderRequestCompleted, session, turn_id, completed),
        event(RenderEmitted, session, turn_id, {"text": reply}),
        ended(session, turn_id, at=T0 + timedelta(seconds=1), reply=reply),
    ]
    return events
