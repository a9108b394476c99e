"""A session's agent applied to its turns, and the tools the runtime itself runs.

`send_message` and `spawn` are offered like any tool and go through approval like any
tool, but no tool-executor runs them: once approved, the session's decider asks its shell
to deliver a `message` to another session (`Deliver`), and records what was delivered
(`turnstream.core.turn.outbound`).
"""

from __future__ import annotations

from turnstream.core.events import SessionConfiguredData
from turnstream.core.immutable import with_changes
from turnstream.core.turn.state import ToolInfo, TurnConfig

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


def with_agent(config: TurnConfig, agent: SessionConfiguredData | None) -> TurnConfig:
    """The turn configuration of a session of `agent` (None: the default agent): the
    runtime's tools offered beside the registered ones, then the profile's allowlist,
    model, bound and system prompt."""
    tools = config.tools
    if not any(t.name in RUNTIME_TOOLS for t in tools):
        tools = (*tools, *RUNTIME_TOOLS.values())
    if agent is None:
        return config if tools is config.tools else with_changes(config, tools=tools)
    if agent.tools is not None:
        allowed = set(agent.tools)
        tools = tuple(t for t in tools if t.name in allowed)
    changes: dict[str, object] = {"tools": tools, "agent": agent.agent}
    if agent.provider is not None:
        changes["provider"] = agent.provider
    if agent.model is not None:
        changes["model"] = agent.model
    if agent.max_iterations is not None:
        changes["max_iterations"] = agent.max_iterations
    if agent.system_prompt:
        changes["system_prompt"] = agent.system_prompt
    if agent.fallback_model is not None:
        own = agent.provider or config.provider
        changes["fallback"] = (agent.fallback_provider or own, agent.fallback_model)
    return with_changes(config, **changes)
