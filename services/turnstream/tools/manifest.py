"""The tool manifest: what an executor offers, as the runners learn it (pure; publishing
and watching it in KV is `turnstream.runtime.manifest`).

The executor puts `{"digest", "tools"}` under the key `manifest` of the bucket
`<prefix>_tools` whenever its tool list changes (at start, and when an MCP server's tools
change); `watch_tools` hands a runner every new manifest. The digest is the sha256 of the
canonical JSON of the tool list, so a request can record which tool list the model saw.
All executors of one deployment are expected to offer the same tools (one key).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from turnstream.core.turn import ToolInfo
from turnstream.tools.base import ToolSpec
from turnstream.tools.registry import ToolRegistry


def entries(specs: list[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "name": s.name,
            "description": s.description,
            "parameters": s.parameters,
            "read_only": s.read_only,
            "idempotent": s.idempotent,
            "timeout_s": s.timeout_s,
        }
        for s in sorted(specs, key=lambda s: s.name)
    ]


def digest(tools: list[dict[str, Any]]) -> str:
    """sha256 of the canonical JSON (sorted keys, no spaces) of the tool list."""
    canonical = json.dumps(tools, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def manifest(registry: ToolRegistry) -> dict[str, Any]:
    tools = entries(registry.specs())
    return {"digest": digest(tools), "tools": tools}


def infos(value: dict[str, Any]) -> tuple[ToolInfo, ...]:
    """The runner's `tool_infos` of a published manifest."""
    return tuple(ToolInfo(**tool) for tool in value["tools"])
