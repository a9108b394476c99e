"""How the two APIs bill a request's input against their prompt caches, for the fake servers.

Not the adapters' logic seen again: the rules as the providers document them, applied to
the body the SDK actually sent, so a breakpoint in the wrong place, or a prefix that changes
from call to call, shows up as input billed at the full price.

- Anthropic (explicit breakpoints): the request is read as blocks in the API's order (tools,
  system, messages). At each `cache_control` breakpoint the API looks for a cache entry of
  the prefix ending there, or at one of the 20 blocks before it; the longest found is read.
  The rest up to the last breakpoint is written (each breakpoint's prefix becomes an entry),
  if that prefix is at least the model's minimum; anything after it is plain input.
- OpenAI (automatic): a prompt of 1,024 tokens or more is matched against earlier prompts;
  the longest prefix it shares with one, in steps of 128 tokens, is read from the cache and
  counted inside `prompt_tokens` as `cached_tokens`.

Tokens are estimated as characters / 4 of each block's compact JSON.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

LOOKBACK_BLOCKS = 20
TTL_S = {"5m": 300.0, "1h": 3600.0}


def _tokens(text: str) -> int:
    return (len(text) + 3) // 4


def _chain(previous: bytes, part: str) -> bytes:
    return hashlib.sha256(previous + part.encode()).digest()


@dataclass(frozen=True)
class Billed:
    """One request's input as the API would bill it (apart, as Anthropic reports it)."""

    input_tokens: int
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0


@dataclass
class AnthropicCache:
    minimum: int = 1024
    """Shortest prefix the model caches (Sonnet and Opus: 1,024; Haiku: 2,048)."""
    clock: Callable[[], float] = time.monotonic
    entries: dict[bytes, float] = field(default_factory=dict)
    """Prefix hash → when it expires."""

    def bill(self, body: dict[str, Any]) -> Billed:
        blocks = _anthropic_blocks(body)
        hashes, totals, marks = [], [], []
        chain, total = b"", 0
        for part, mark in blocks:
            chain, total = _chain(chain, part), total + _tokens(part)
            hashes.append(chain)
            totals.append(total)
            marks.append(mark)
        now = self.clock()
        breakpoints = [i for i, mark in enumerate(marks) if mark is not None]
        if not breakpoints:
            return Billed(input_tokens=total)
        hit = -1
        for b in breakpoints:
            for j in range(b, max(b - LOOKBACK_BLOCKS - 1, -1), -1):
                if self.entries.get(hashes[j], 0.0) > now:
                    hit = max(hit, j)
                    break
        read = totals[hit] if hit >= 0 else 0
        if hit >= 0 and (ttl := marks[hit]) is not None:  # a read refreshes the entry
            self.entries[hashes[hit]] = now + TTL_S[ttl]
        last = breakpoints[-1]
        write = 0
        if totals[last] >= self.minimum and last > hit:
            write = totals[last] - read
            for b in breakpoints:
                if b > hit and totals[b] >= self.minimum:
                    self.entries[hashes[b]] = now + TTL_S[marks[b] or "5m"]
        return Billed(total - read - write, write, read)


def _anthropic_blocks(body: dict[str, Any]) -> list[tuple[str, str | None]]:
    """`(compact JSON without cache_control, its TTL if a breakpoint)` in the API's order."""
    out: list[tuple[str, str | None]] = []

    def add(block: dict[str, Any], role: str = "") -> None:
        control = block.get("cache_control")
        plain = {k: v for k, v in block.items() if k != "cache_control"}
        mark = str(control.get("ttl", "5m")) if isinstance(control, dict) else None
        out.append((role + json.dumps(plain, separators=(",", ":"), sort_keys=True), mark))

    for tool in body.get("tools") or []:
        add(tool)
    system = body.get("system")
    if isinstance(system, str):
        add({"type": "text", "text": system})
    for block in system if isinstance(system, list) else []:
        add(block)
    for message in body.get("messages") or []:
        content = message["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for index, block in enumerate(content):
            add(block, role=message["role"] + ":" if index == 0 else "")
    return out


@dataclass
class OpenAICache:
    minimum: int = 1024
    step: int = 128
    seen: list[str] = field(default_factory=list)
    """Earlier prompts, rendered (tools, then the messages in order)."""

    def bill(self, body: dict[str, Any]) -> tuple[int, int]:
        """`(prompt_tokens, cached_tokens)` as OpenAI reports them (cached inside prompt):
        the longest prefix any earlier prompt shared, in whole steps of 128 tokens."""
        parts = [body.get("tools") or [], *body["messages"]]
        prompt = "".join(json.dumps(p, separators=(",", ":"), sort_keys=True) for p in parts)
        # a character prefix is what is wanted here, not a path
        shared = max((len(os.path.commonprefix([prompt, s])) for s in self.seen), default=0)  # noqa: RUF071
        self.seen.append(prompt)
        total, cached = _tokens(prompt), shared // 4
        if total < self.minimum or cached < self.minimum:
            return total, 0
        return total, cached - cached % self.step
