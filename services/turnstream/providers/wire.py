"""Conversation history → each API's message shapes (pure)."""

from __future__ import annotations

from typing import Any

import orjson

from turnstream.core.turn import Message, ToolInfo


def anthropic_messages(history: tuple[Message, ...]) -> list[dict[str, Any]]:
    """Messages API: tool results are `tool_result` blocks in a user turn; turns alternate."""
    out: list[dict[str, Any]] = []
    for message in history:
        if message.role == "assistant":
            blocks: list[dict[str, Any]] = []
            if message.text:
                blocks.append({"type": "text", "text": message.text})
            blocks += [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                for c in message.tool_calls
            ]
            role, content = "assistant", blocks or [{"type": "text", "text": ""}]
        elif message.role == "tool":
            role = "user"
            content = [
                {
                    "type": "tool_result",
                    "tool_use_id": message.tool_call_id,
                    "content": message.text,
                    "is_error": message.is_error,
                }
            ]
        else:
            role, content = "user", [{"type": "text", "text": message.text}]
        if out and out[-1]["role"] == role:
            out[-1]["content"] = out[-1]["content"] + content
        else:
            out.append({"role": role, "content": content})
    return out


def anthropic_tools(tools: tuple[ToolInfo, ...]) -> list[dict[str, Any]]:
    return [
        {"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools
    ]


def openai_messages(system: str | None, history: tuple[Message, ...]) -> list[dict[str, Any]]:
    """Chat Completions: tool results are `tool` messages paired by `tool_call_id`."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in history:
        if message.role == "assistant":
            entry: dict[str, Any] = {"role": "assistant", "content": message.text or None}
            if message.tool_calls:
                entry["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {
                            "name": c.name,
                            "arguments": orjson.dumps(c.arguments).decode(),
                        },
                    }
                    for c in message.tool_calls
                ]
            out.append(entry)
        elif message.role == "tool":
            out.append(
                {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.text}
            )
        else:
            out.append({"role": "user", "content": message.text})
    return out


def openai_tools(tools: tuple[ToolInfo, ...]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in tools
    ]
