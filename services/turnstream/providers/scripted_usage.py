"""The scripted provider's usage: what the Messages API would bill its request, against a
prompt cache of its own, at a cost that does not grow with the session's history.

The request is read as the API reads it, in blocks (each tool, the system prompt's parts,
each history message, the volatile context last), with breakpoints where the Anthropic
adapter puts them (`wire.anthropic_request`: the last tool, the system prompt's own text,
its end, the last message) and billed by the documented rules (`cache_billing`). The
blocks' prefix hashes are remembered per session: the next call of a session whose history
only grew hashes only its new messages (a history is a tuple of the same `Message`
objects, extended), so a call costs the same at the 2nd turn and the 200th.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from turnstream.core.events import Usage
from turnstream.core.turn import Message, ProviderRequest, ToolInfo
from turnstream.providers.cache_billing import AnthropicCache, chain_block, estimate_tokens
from turnstream.providers.wire import PromptCache

SESSIONS = 512
"""Sessions whose blocks are remembered (the last called): a runner's memory must not grow
with every session it served."""
ENTRIES = 1024
"""Prompt-cache entries remembered (a real cache keeps more)."""


@dataclass
class _Blocks:
    """One session's request as blocks: the head (tools and system prompt) and then one
    block per history message, each with its prefix hash and the tokens up to it."""

    tools: tuple[ToolInfo, ...]
    system: str | None
    split: int | None
    messages: tuple[Message, ...] = ()
    hashes: list[bytes] = field(default_factory=list)
    totals: list[int] = field(default_factory=list)
    marks: list[str | None] = field(default_factory=list)
    head: int = 0
    """How many of the blocks are the head's."""
    head_breakpoints: tuple[int, ...] = ()

    def same_head(self, request: ProviderRequest) -> bool:
        return (
            (request.tools is self.tools or request.tools == self.tools)
            and request.system == self.system
            and request.system_split == self.split
        )

    def add(self, part: bytes, mark: str | None = None) -> None:
        previous = self.hashes[-1] if self.hashes else b""
        self.hashes.append(chain_block(previous, part))
        self.totals.append((self.totals[-1] if self.totals else 0) + estimate_tokens(part))
        self.marks.append(mark)

    def keep(self, blocks: int) -> None:
        del self.hashes[blocks:], self.totals[blocks:], self.marks[blocks:]


@dataclass
class ScriptedBilling:
    """Usage for the scripted provider's calls, as the API would report it."""

    cache: PromptCache = "5m"
    prompt_cache: AnthropicCache = field(
        default_factory=lambda: AnthropicCache(max_entries=ENTRIES)
    )
    sessions: dict[str, _Blocks] = field(default_factory=dict)

    def usage(self, request: ProviderRequest, said: str) -> Usage:
        """Input billed against the cache (writes and reads apart, nothing cached under
        the minimum), output as the characters of what the reply `said` / 4."""
        ttl = None if self.cache == "off" else self.cache
        blocks = self._blocks(request, ttl)
        marks, breakpoints = blocks.marks, list(blocks.head_breakpoints)
        last = len(marks) - 1
        if ttl and last >= blocks.head and request.messages[-1].text != "":
            # the last message's breakpoint (the adapter's; the API refuses one on empty text)
            marks[last] = ttl
            breakpoints.append(last)
        total = blocks.totals[-1] if blocks.totals else 0
        if request.volatile:
            total += estimate_tokens(request.volatile.encode())
        try:
            billed = self.prompt_cache.bill_blocks(
                blocks.hashes, blocks.totals, marks, total, breakpoints
            )
        finally:
            if last >= blocks.head:
                marks[last] = None  # a message's mark moves on with the history
        return Usage(
            input_tokens=billed.input_tokens,
            output_tokens=estimate_tokens(said.encode()),
            cache_write_tokens=billed.cache_write_tokens,
            cache_read_tokens=billed.cache_read_tokens,
        )

    def _blocks(self, request: ProviderRequest, ttl: str | None) -> _Blocks:
        blocks = self.sessions.pop(request.session_id, None)
        if blocks is None or not blocks.same_head(request):
            blocks = _head(request, ttl)
        kept = _shared(blocks.messages, request.messages)
        blocks.keep(blocks.head + kept)
        for message in request.messages[kept:]:
            blocks.add(_message_block(message))
        blocks.messages = request.messages
        self.sessions[request.session_id] = blocks  # the most recent last
        if len(self.sessions) > SESSIONS:
            del self.sessions[next(iter(self.sessions))]
        return blocks


def _head(request: ProviderRequest, ttl: str | None) -> _Blocks:
    blocks = _Blocks(request.tools, request.system, request.system_split)
    for n, tool in enumerate(request.tools):
        part = orjson.dumps(
            {"name": tool.name, "description": tool.description, "input": tool.parameters},
            option=orjson.OPT_SORT_KEYS,
        )
        blocks.add(part, ttl if n == len(request.tools) - 1 else None)
    system, split = request.system, request.system_split
    if system and split and 0 < split < len(system):
        blocks.add(system[:split].encode(), ttl)
        blocks.add(system[split:].encode(), ttl)
    elif system:
        blocks.add(system.encode(), ttl)
    blocks.head = len(blocks.hashes)
    blocks.head_breakpoints = tuple(i for i, mark in enumerate(blocks.marks) if mark)
    return blocks


def _shared(before: tuple[Message, ...], now: tuple[Message, ...]) -> int:
    """How many messages `now` begins with that are `before`'s (the same objects, or equal)."""
    if now[: len(before)] == before:  # the history grew: compared in C, the same objects at once
        return len(before)
    n = 0
    for old, new in zip(before, now, strict=False):
        if old is not new and old != new:
            break
        n += 1
    return n


def _message_block(message: Message) -> bytes:
    return orjson.dumps(
        {
            "role": message.role,
            "text": message.text,
            "calls": [(c.id, c.name, c.arguments) for c in message.tool_calls],
            "result_of": message.tool_call_id,
            "files": [a.object for a in message.attachments],
        }
    )
