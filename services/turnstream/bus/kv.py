"""Following a KV bucket: every change of its entries, handed on as it comes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("turnstream.bus")


async def watch(kv: Any, stop: asyncio.Event, on_entry: Callable[[Any], None], what: str) -> None:
    """Hand each entry of `kv` (its current values, then every change) to `on_entry` until
    `stop` is set; a failing watch is retried, so a reconnect loses nothing."""
    watcher = await kv.watchall()
    try:
        while not stop.is_set():
            try:
                entry = await watcher.updates(timeout=0.5)
            except Exception as exc:  # nats-py raises its own timeout type here
                if "timeout" not in type(exc).__name__.lower():
                    log.warning("%s watch failed (%s); retrying", what, exc)
                    await asyncio.sleep(0.5)
                continue
            if entry is not None:  # None: the end of the current values
                on_entry(entry)
    finally:
        await watcher.stop()
