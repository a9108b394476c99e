"""Conversation history → each API's message shapes (pure), with the prompt cache's
breakpoints where a request's stable prefix ends."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any, Literal

import orjson

from turnstream.core.events import Attachment
from turnstream.core.turn import Message, ProviderRequest, ToolInfo

PromptCache = Literal["5m", "1h", "off"]
"""How long the provider keeps a prompt-cache entry (Anthropic's two TTLs), or no caching."""


def anthropic_request(
    request: ProviderRequest, model: str, max_tokens: int, cache: PromptCache = "5m"
) -> dict[str, Any]:
    """Messages API parameters. With a cache TTL, breakpoints (at most the API's four) mark
    what the next call resends unchanged: the last tool (tools are rendered first), the
    system prompt's own text and then its stable context (so a compaction's new summary
    leaves the prompt cached), and the last block of the history. Context that changes every
    turn (`request.volatile`) comes after the last one, so it never spoils the prefix."""
    mark: dict[str, Any] | None = None
    if cache != "off":
        mark = {"type": "ephemeral"} | ({"ttl": "1h"} if cache == "1h" else {})
    messages = anthropic_messages(request.messages, request.files)
    params: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": messages}
    system: list[dict[str, Any]] = []
    split = request.system_split
    if request.system and split and 0 < split < len(request.system):
        system.append({"type": "text", "text": request.system[:split]})
        if mark:
            system[0] |= {"cache_control": mark}
        system.append({"type": "text", "text": request.system[split:]})
    elif request.system:
        system.append({"type": "text", "text": request.system})
    if request.tools:
        params["tools"] = anthropic_tools(request.tools)
        if mark:
            params["tools"][-1] = params["tools"][-1] | {"cache_control": mark}
    if mark and system:
        system[-1] = system[-1] | {"cache_control": mark}
    if mark and messages and messages[-1]["content"][-1].get("text") != "":
        last = messages[-1]["content"]  # (the API refuses a mark on an empty text block)
        last[-1] = last[-1] | {"cache_control": mark}
    if request.volatile:
        note = {"type": "text", "text": request.volatile}
        if messages and messages[-1]["role"] == "user":
            messages[-1]["content"].append(note)
        else:  # an assistant prefill ends the history: the system prompt's end, uncached
            system.append(note)
    if system:
        params["system"] = system
    return params


def anthropic_messages(
    history: tuple[Message, ...], files: Mapping[str, bytes] | None = None
) -> list[dict[str, Any]]:
    """Messages API: tool results are `tool_result` blocks in a user turn; turns alternate.
    A user message's attachments follow its text: images as `image` blocks, PDFs as
    `document` blocks, anything else (or bytes not at hand) as a note naming the file."""
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
            content += [
                _anthropic_part(a, (files or {}).get(a.sha256)) for a in message.attachments
            ]
        if out and out[-1]["role"] == role:
            out[-1]["content"] = out[-1]["content"] + content
        else:
            out.append({"role": role, "content": content})
    return out


def anthropic_tools(tools: tuple[ToolInfo, ...]) -> list[dict[str, Any]]:
    return [
        {"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools
    ]


def openai_messages(
    system: str | None,
    history: tuple[Message, ...],
    volatile: str | None = None,
    files: Mapping[str, bytes] | None = None,
) -> list[dict[str, Any]]:
    """Chat Completions: tool results are `tool` messages paired by `tool_call_id`. OpenAI
    caches the longest prefix it saw before by itself, so `volatile` context goes last: into
    the last user message, or a user message of its own after tool results."""
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
        elif message.attachments:
            parts: list[dict[str, Any]] = [{"type": "text", "text": message.text}]
            parts += [_openai_part(a, (files or {}).get(a.sha256)) for a in message.attachments]
            out.append({"role": "user", "content": parts})
        else:
            out.append({"role": "user", "content": message.text})
    if volatile:
        if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
            out[-1] = out[-1] | {
                "content": [*out[-1]["content"], {"type": "text", "text": volatile}]
            }
        elif out and out[-1]["role"] == "user":
            out[-1] = out[-1] | {"content": f"{out[-1]['content']}\n\n{volatile}"}
        else:
            out.append({"role": "user", "content": volatile})
    return out


def openai_tools(tools: tuple[ToolInfo, ...]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in tools
    ]


IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""What both APIs take as an image."""


def attachment_note(attachment: Attachment) -> str:
    """What the model is told of an attachment it cannot read itself."""
    return (
        f"[attachment {attachment.name!r}: {attachment.media_type}, {attachment.size:,} bytes; "
        "not shown to you, read it with the read_attachment tool]"
    )


def _anthropic_part(attachment: Attachment, data: bytes | None) -> dict[str, Any]:
    if data is not None and attachment.media_type in IMAGE_TYPES | {"application/pdf"}:
        kind = "image" if attachment.media_type in IMAGE_TYPES else "document"
        source = {
            "type": "base64",
            "media_type": attachment.media_type,
            "data": base64.b64encode(data).decode(),
        }
        return {"type": kind, "source": source}
    return {"type": "text", "text": attachment_note(attachment)}


def _openai_part(attachment: Attachment, data: bytes | None) -> dict[str, Any]:
    if data is not None and attachment.media_type in IMAGE_TYPES | {"application/pdf"}:
        url = f"data:{attachment.media_type};base64,{base64.b64encode(data).decode()}"
        if attachment.media_type in IMAGE_TYPES:
            return {"type": "image_url", "image_url": {"url": url}}
        return {"type": "file", "file": {"filename": attachment.name, "file_data": url}}
    return {"type": "text", "text": attachment_note(attachment)}
