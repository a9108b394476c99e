"""The shell of `push_index`: a KV watch of the push bucket keeps one `PushIndex`
current, and `trusted()` says whether it may be believed for the events fetched so far.

```
STREAM.INFO (last seq L0) ─► watchall ─► current values … None ─► index live (≥ L0)
                                        └─ every change after ─► index.apply
batch fetched ─► STREAM.INFO (last seq L) ─► index.applied ≥ L (waits ≤ BARRIER_WITHIN_S)
```

A watch that fails is started again with a fresh index (one that missed a delete would
keep a task for ever); until it is live the old one answers, and `trusted()` is false
while it lags.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from turnstream.bus import Bus
from turnstream.bus.errors import BusTimeout
from turnstream.http.a2a.push import PushStore
from turnstream.http.a2a.push_index import PushIndex
from turnstream.http.a2a.store import push_bucket_name

log = logging.getLogger("turnstream.http.push")
BARRIER_WITHIN_S = 2.0
"""How long a batch waits for the watch to be current before its events take the slow
path (a KV read each)."""


class ConfigWatch:
    def __init__(self, bus: Bus, store: PushStore) -> None:
        self.bus = bus
        self.store = store
        self.index = PushIndex()
        self.live = asyncio.Event()
        """Set once the first watch has handed on the bucket's current values."""
        self._changed = asyncio.Condition()
        self.stream = f"KV_{push_bucket_name(bus)}"

    async def last_seq(self) -> int:
        info = await self.bus.stream_info(self.stream)
        return int(info.state.last_seq)

    async def trusted(self) -> bool:
        """Whether the index holds every config written before now (the bucket's last
        sequence, read now, is applied): then a task not in it has none."""
        try:
            target = await self.last_seq()
        except Exception as exc:
            log.warning("push configs: the bucket's last sequence unknown (%s)", exc)
            return False
        try:
            async with asyncio.timeout(BARRIER_WITHIN_S), self._changed:
                await self._changed.wait_for(lambda: self.index.current(target))
        except TimeoutError:
            log.warning("push configs: the watch lags (at %d of %d)", self.index.applied, target)
            return False
        return True

    async def configured(self, stop: asyncio.Event) -> None:
        """Return once some task has a config (or `stop` is set)."""
        while not stop.is_set():
            try:
                async with asyncio.timeout(0.5), self._changed:
                    await self._changed.wait_for(lambda: bool(self.index.tasks))
                return
            except TimeoutError:
                continue

    async def follow(self, stop: asyncio.Event) -> None:
        """Keep `index` current until `stop`; a watch that fails is started again."""
        while not stop.is_set():
            try:
                await self._watch(stop)
            except Exception as exc:
                log.warning("push configs: watch failed (%s); again", exc)
                try:
                    async with asyncio.timeout(1.0):
                        await stop.wait()
                except TimeoutError:
                    pass

    async def _watch(self, stop: asyncio.Event) -> None:
        kv = await self.store.kv()
        start = await self.last_seq()  # the first values cover at least this much
        watcher = await kv.watchall()
        index = PushIndex()
        try:
            while not stop.is_set():
                try:
                    entry: Any = await watcher.updates(timeout=0.5)
                except (TimeoutError, BusTimeout):
                    continue
                if entry is None:  # the end of the current values
                    index.caught_up(start)
                    self.index = index
                    self.live.set()
                else:
                    index.apply(entry.key, entry.value, entry.operation, entry.revision)
                if self.index is index:
                    async with self._changed:
                        self._changed.notify_all()
        finally:
            try:
                await watcher.stop()
            except Exception as exc:  # the connection may be gone
                log.debug("push configs: watch did not stop cleanly: %s", exc)
