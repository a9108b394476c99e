"""The tools the runtime itself runs: `send_message` and `spawn`.

They are offered like any tool and go through approval like any tool, but no
tool-executor runs them: once approved, the session's decider asks its shell to deliver a
`message` to another session (`Deliver`), and records what was delivered
(`turnstream.core.turn.runtime_calls` judges each call, `core.session.outbound` sends it).
"""

from __future__ import annotations

from turnstream.core.turn.state import ToolInfo

SEND_MESSAGE = ToolInfo(
    name="send_message",
    description=(
        "Send a message to another session (another agent's conversation). With "
        "expectReply, that session's reply comes back to this session as a new message."
    ),
    parameters={
        "type": "object",
        "properties": {
            "to": {"type": "string", "description": "the session id to send to"},
            "text": {"type": "string", "minLength": 1},
            "expectReply": {"type": "boolean", "default": False},
        },
        "required": ["to", "text"],
        "additionalProperties": False,
    },
    read_only=False,
    idempotent=True,
    timeout_s=30.0,
)
SPAWN = ToolInfo(
    name="spawn",
    description=(
        "Delegate a task to a sub-turn: a full turn of an agent (this one, or `agent`) in a "
        "new child session. `sync` (the default) answers with the child's reply; `async` "
        "answers at once with the child's session id, and its reply arrives later."
    ),
    parameters={
        "type": "object",
        "properties": {
            "task": {"type": "string", "minLength": 1, "description": "what the child must do"},
            "agent": {"type": "string", "description": "an agent profile's name"},
            "mode": {"type": "string", "enum": ["sync", "async"], "default": "sync"},
        },
        "required": ["task"],
        "additionalProperties": False,
    },
    # consecutive spawns run together (the child's own tool calls are approved in turn)
    read_only=True,
    idempotent=True,
    timeout_s=300.0,
)
RUNTIME_TOOLS: dict[str, ToolInfo] = {t.name: t for t in (SEND_MESSAGE, SPAWN)}


def is_runtime_tool(name: str) -> bool:
    return name in RUNTIME_TOOLS
