"""Between A2A's types and turnstream's: a task record as an A2A `Task`, a reply's
decision, a live token's text (no I/O)."""

from __future__ import annotations

from typing import Any

import orjson
from a2a.types.a2a_pb2 import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import InvalidParamsError
from google.protobuf.json_format import MessageToDict, ParseDict  # type: ignore[import-untyped]

from turnstream.http.a2a.store import TaskRecord
from turnstream.http.a2a.view import TurnView

STATES = {
    "submitted": TaskState.TASK_STATE_SUBMITTED,
    "working": TaskState.TASK_STATE_WORKING,
    "input-required": TaskState.TASK_STATE_INPUT_REQUIRED,
    "completed": TaskState.TASK_STATE_COMPLETED,
    "failed": TaskState.TASK_STATE_FAILED,
    "canceled": TaskState.TASK_STATE_CANCELED,
    "rejected": TaskState.TASK_STATE_REJECTED,
}


def to_task(record: TaskRecord, history_length: int | None = None) -> Task:
    """The A2A task of `record`: its status (with a message saying what is needed or what
    came of it), the client's messages and the reply as history, the reply as an artifact."""
    view = record.view
    status = TaskStatus(state=STATES[view.state])
    status.timestamp.GetCurrentTime()
    text = view.status_text()
    history = [ParseDict(m, Message(), ignore_unknown_fields=True) for m in record.messages]
    agent_message = None
    if text and view.state != "submitted" and view.state != "working":
        agent_message = Message(
            message_id=f"{view.turn_id}-{view.state}-{view.last_seq}",
            context_id=view.session_id,
            task_id=view.turn_id,
            role=Role.ROLE_AGENT,
            parts=[Part(text=text)],
        )
        if view.interaction is not None:
            agent_message.parts.append(Part(data=_value({"interaction": view.interaction})))
        status.message.CopyFrom(agent_message)
        history.append(agent_message)
    if history_length is not None and history_length >= 0:
        history = history[len(history) - history_length :] if history_length else []
    task = Task(id=view.turn_id, context_id=view.session_id, status=status, history=history)
    if view.state == "completed" and view.reply is not None:
        reply = Part(text=view.reply)
        task.artifacts.append(
            Artifact(artifact_id=f"{view.turn_id}-reply", name="reply", parts=[reply])
        )
    return task


def _value(data: dict[str, Any]) -> Any:
    from google.protobuf.struct_pb2 import Value  # type: ignore[import-untyped]

    value = Value()
    value.struct_value.update(data)
    return value


def text_of(message: Message) -> str:
    return "\n".join(p.text for p in message.parts if p.text)


def decision(message: Message) -> tuple[str, str | None]:
    """`approve` or `deny` (and a reason) from a reply to a prompt: a data part
    `{"decision", "reason"}`, else the text's first word."""
    for part in message.parts:
        if part.HasField("data"):
            data = MessageToDict(part.data)
            if isinstance(data, dict) and data.get("decision") in ("approve", "deny"):
                reason = data.get("reason")
                return data["decision"], reason if isinstance(reason, str) else None
    words = text_of(message).strip().split(maxsplit=1)
    first = words[0].lower().strip(".,!") if words else ""
    if first in ("approve", "approved", "yes", "y", "ok"):
        return "approve", words[1] if len(words) > 1 else None
    if first in ("deny", "denied", "no", "n", "reject"):
        return "deny", words[1] if len(words) > 1 else None
    raise InvalidParamsError(
        message="the task waits for an approval: reply 'approve' or 'deny' "
        '(or a data part {"decision": "approve"|"deny", "reason": "..."})'
    )


def token_text(data: bytes, turn_id: str) -> str:
    """A live token's text (`ts.live` payload `{turnId, iteration, index, delta}`), if it
    is this turn's."""
    try:
        token = orjson.loads(data)
    except orjson.JSONDecodeError:
        return ""
    if not isinstance(token, dict) or token.get("turnId") != turn_id:
        return ""
    delta = token.get("delta")
    return delta if isinstance(delta, str) else ""


def status_update(view: TurnView, seq: int) -> TaskStatusUpdateEvent:
    """The update a webhook is sent: the task's status now, its id (`updateId`, the task
    and the log sequence of the change) and sequence in `metadata`."""
    task = to_task(TaskRecord(view))
    update = TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id, status=task.status)
    update.metadata.update({"updateId": f"{task.id}:{seq}", "seq": seq})
    return update
