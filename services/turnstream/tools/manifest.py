"""The tool manifest: what an executor offers, as the runners learn it (pure; publishing
and watching it in KV is `turnstream.runtime.manifest`).

The executor puts `{"digest", "tools"}` under the key `manifest` of the bucket
`<prefix>_tools` whenever its tool list changes (at start, and when an MCP server's tools
change); `watch_tools` hands a runner every new manifest. The digest is the sha256 of the
canonical JSON of the tool list, so a request can record which tool list the model saw.
All executors of one deployment are expected to offer the same tools (one key).
"""

from __future__ import annotations

from typing import Any

from turnstream.core.turn import ToolInfo
from turnstream.core.turn.manifest import digest
from turnstream.core.turn.manifest import entries as listed
from turnstream.tools.base import ToolSpec
from turnstream.tools.registry import ToolRegistry

__all__ = ["digest", "entries", "infos", "manifest"]


def entries(specs: list[ToolSpec]) -> list[dict[str, Any]]:
    """The manifest's tool list (as `turnstream.core.turn.manifest` lists and digests it)."""
    return listed(s.info() for s in specs)


def manifest(registry: ToolRegistry) -> dict[str, Any]:
    tools = entries(registry.specs())
    return {"digest": digest(tools), "tools": tools}


def infos(value: dict[str, Any]) -> tuple[ToolInfo, ...]:
    """The runner's `tool_infos` of a published manifest."""
    return tuple(ToolInfo(**tool) for tool in value["tools"])
