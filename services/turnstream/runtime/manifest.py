"""Publishing the tool manifest to KV (the executor) and following it (a runner).

The executor puts `{"digest", "tools"}` (`turnstream.tools.manifest.manifest`) under the key
`manifest` of the bucket `<prefix>_tools` whenever its tool list changes; `watch_tools`
hands a runner each new one. All executors of one deployment are expected to offer the
same tools (one key).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from turnstream.bus import Bus
from turnstream.bus.errors import KeyMissing
from turnstream.bus.kv import watch
from turnstream.bus.retry import retried
from turnstream.bus.streams import tools_bucket
from turnstream.core.turn import ToolInfo
from turnstream.tools.manifest import infos, manifest
from turnstream.tools.registry import ToolRegistry

log = logging.getLogger("turnstream.runtime.manifest")
KEY = "manifest"


def bucket_name(bus: Bus) -> str:
    return tools_bucket(bus.subjects.prefix)


async def tools_kv(bus: Bus) -> Any:
    """The manifest bucket (the setup step creates it)."""
    return await bus.existing_bucket(bucket_name(bus))


async def publish(bus: Bus, registry: ToolRegistry) -> str:
    """Put the registry's manifest unless the bucket holds it already; its digest."""
    value = manifest(registry)
    kv = await tools_kv(bus)
    try:
        current = await kv.get(KEY)
        if current.value and json.loads(current.value).get("digest") == value["digest"]:
            return str(value["digest"])
    except KeyMissing:
        pass
    await kv.put(KEY, json.dumps(value, sort_keys=True, separators=(",", ":")).encode())
    log.info("tool manifest %s: %d tools", value["digest"], len(value["tools"]))
    return str(value["digest"])


async def watch_tools(
    bus: Bus, on_manifest: Callable[[tuple[ToolInfo, ...], str], None], stop: asyncio.Event
) -> None:
    """Hand `on_manifest(tool_infos, digest)` the current manifest, then each new one."""

    def apply(entry: Any) -> None:
        if entry.key != KEY or entry.operation in ("DEL", "PURGE") or not entry.value:
            return
        try:
            value = json.loads(entry.value)
            tools = infos(value)
        except Exception as exc:  # a bad manifest must not stop the runner
            log.error("tool manifest unreadable (%s); keeping the previous one", exc)
            return
        on_manifest(tools, str(value["digest"]))

    await watch(lambda: tools_kv(bus), stop, apply, "tools")


async def keep_published(bus: Bus, mcp: Any, base: ToolRegistry, holder: Any) -> None:
    """Publish `holder.registry`'s manifest now (asked again while NATS does not answer),
    and again (with `holder.registry` rebuilt from `base` and `mcp`'s tools) whenever an
    MCP server's tools change."""

    async def changed() -> None:
        holder.registry = mcp.registry(base)
        try:
            await publish(bus, holder.registry)
        except Exception as exc:
            log.error("publishing the tool manifest failed: %s", exc)

    mcp.listeners.append(changed)
    await retried("the tool manifest's publication", lambda: publish(bus, holder.registry))
