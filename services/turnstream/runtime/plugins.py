"""What the services learn from their plug-ins: the tools' specs, the remote hooks."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from turnstream.bus import Bus
from turnstream.bus.kv import watch
from turnstream.context.registry import REMOTE_PREFIX
from turnstream.core.turn import ToolInfo
from turnstream.hooks import HookRegistry
from turnstream.tools import ToolRegistry


def tool_infos(registry: ToolRegistry) -> tuple[ToolInfo, ...]:
    """What the turn core needs to know of each registered tool."""
    return tuple(spec.info() for spec in registry.specs())


async def watch_hooks(
    bus: Bus,
    hooks: HookRegistry,
    stop: asyncio.Event,
    on_context: Callable[[str, bytes | None], None] | None = None,
) -> None:
    """Keep the remote hooks of `hooks` in step with the hooks bucket, and hand
    `on_context` its `context.<name>` entries (remote context providers)."""

    def apply(entry: Any) -> None:
        deleted = entry.operation in ("DEL", "PURGE") or entry.value is None
        value = None if deleted else entry.value
        if entry.key.startswith(REMOTE_PREFIX):
            if on_context is not None:
                on_context(entry.key, value)
            return
        hooks.set_remote(entry.key, value)

    await watch(lambda: bus.key_value(bus.subjects.hooks_bucket), stop, apply, "hooks")
