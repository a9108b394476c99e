"""How the two APIs bill a request's input against their prompt caches: the scripted
provider's usage, and the tests' wire fakes'.

Not the adapters' logic seen again: the rules as the providers document them, applied to
the body the SDK actually sent (the fakes) or would send (the scripted provider bills the
Messages API body `wire.anthropic_request` builds), so a breakpoint in the wrong place, or a
prefix that changes from call to call, shows up as input billed at the full price.

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
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

LOOKBACK_BLOCKS = 20
TTL_S = {"5m": 300.0, "1h": 3600.0}


def estimate_tokens(text: str | bytes) -> int:
    return (len(text) + 3) // 4


def _compact(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def chain_block(previous: bytes, part: bytes) -> bytes:
    """The hash of a prefix one block longer."""
    return hashlib.sha256(previous + part).digest()


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
    """Prefix hash → when it expires, oldest first."""
    max_entries: int | None = None
    """Keep at most this many (the scripted provider's bound: a runner's memory must not
    grow with every session it served); unset: every entry until it expires."""

    def bill(self, body: dict[str, Any]) -> Billed:
        hashes, totals, marks = [], [], []
        chain, total = b"", 0
        for part, mark in _anthropic_blocks(body):
            chain, total = chain_block(chain, part), total + estimate_tokens(part)
            hashes.append(chain)
            totals.append(total)
            marks.append(mark)
        return self.bill_blocks(hashes, totals, marks, total)

    def bill_blocks(
        self,
        hashes: list[bytes],
        totals: list[int],
        marks: list[str | None],
        total: int,
        breakpoints: list[int] | None = None,
    ) -> Billed:
        """Bill a request given as its blocks: the hash of the prefix ending at each, the
        tokens up to each, each one's breakpoint TTL (None: no breakpoint), and the
        request's tokens in all (blocks after the last one included); `breakpoints`, the
        indexes of the marked blocks, if the caller knows them."""
        now = self.clock()
        if breakpoints is None:
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
            self._keep(hashes[hit], now + TTL_S[ttl])
        last = breakpoints[-1]
        write = 0
        if totals[last] >= self.minimum and last > hit:
            write = totals[last] - read
            for b in breakpoints:
                if b > hit and totals[b] >= self.minimum:
                    self._keep(hashes[b], now + TTL_S[marks[b] or "5m"])
        return Billed(total - read - write, write, read)

    def _keep(self, prefix: bytes, expires: float) -> None:
        self.entries.pop(prefix, None)  # to the end: the newest
        self.entries[prefix] = expires
        if self.max_entries is not None and len(self.entries) > self.max_entries:
            del self.entries[next(iter(self.entries))]


def _anthropic_blocks(body: dict[str, Any]) -> list[tuple[bytes, str | None]]:
    """`(compact JSON without cache_control, its TTL if a breakpoint)` in the API's order."""
    out: list[tuple[bytes, str | None]] = []

    def add(block: dict[str, Any], role: str = "") -> None:
        control = block.get("cache_control")
        plain = {k: v for k, v in block.items() if k != "cache_control"}
        mark = str(control.get("ttl", "5m")) if isinstance(control, dict) else None
        out.append((role.encode() + _compact(plain), mark))

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
    seen: list[bytes] = field(default_factory=list)
    """Earlier prompts, rendered (tools, then the messages in order)."""

    def bill(self, body: dict[str, Any]) -> tuple[int, int]:
        """`(prompt_tokens, cached_tokens)` as OpenAI reports them (cached inside prompt):
        the longest prefix any earlier prompt shared, in whole steps of 128 tokens."""
        parts = [body.get("tools") or [], *body["messages"]]
        prompt = b"".join(_compact(p) for p in parts)
        # a character prefix is what is wanted here, not a path
        shared = max((len(os.path.commonprefix([prompt, s])) for s in self.seen), default=0)  # noqa: RUF071
        self.seen.append(prompt)
        total, cached = estimate_tokens(prompt), shared // 4
        if total < self.minimum or cached < self.minimum:
            return total, 0
        return total, cached - cached % self.step
