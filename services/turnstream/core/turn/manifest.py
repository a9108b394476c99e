"""The digest of a tool list: the executors' published manifest, and the tools one model
request offers (`ProviderRequestStarted.toolsDigest`: the manifest's tools, filtered by a
stage or an agent, plus the runtime's own and a stage's completion tool), computed alike."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from turnstream.core.turn.state import ToolInfo

_MEMO: dict[tuple[int, ...], tuple[tuple[ToolInfo, ...], str]] = {}
"""Digests of recent tool lists by the identity of their tools (a session's requests offer
the same tool objects, in tuples made afresh)."""
_MEMO_SIZE = 64


def entry(tool: ToolInfo) -> dict[str, Any]:
    """One tool as the manifest lists it."""
    return {
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters,
        "read_only": tool.read_only,
        "idempotent": tool.idempotent,
        "timeout_s": tool.timeout_s,
    }


def entries(tools: Iterable[ToolInfo]) -> list[dict[str, Any]]:
    """The manifest's tool list: every tool's entry, by name."""
    return [entry(t) for t in sorted(tools, key=lambda t: t.name)]


def digest(listed: list[dict[str, Any]]) -> str:
    """sha256 of the canonical JSON (sorted keys, no spaces) of a manifest's tool list."""
    canonical = json.dumps(listed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def tools_digest(tools: tuple[ToolInfo, ...]) -> str:
    """The digest of the tools a request offers (the same tool objects again cost a lookup)."""
    key = tuple(map(id, tools))
    known = _MEMO.get(key)
    if known is not None and all(a is b for a, b in zip(known[0], tools, strict=True)):
        return known[1]
    value = digest(entries(tools))
    if len(_MEMO) >= _MEMO_SIZE:
        _MEMO.clear()
    _MEMO[key] = (tools, value)
    return value
