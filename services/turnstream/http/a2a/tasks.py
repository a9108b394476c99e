"""A task's record (KV) and its session's log read together: loaded and folded up to the
end of the log, followed as the log grows, and streamed as A2A update events."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Protocol

from a2a.types.a2a_pb2 import Artifact, Part, TaskArtifactUpdateEvent, TaskStatusUpdateEvent
from a2a.utils.errors import TaskNotFoundError

from turnstream.core.events import decode
from turnstream.http.a2a.access import require
from turnstream.http.a2a.mapping import to_task, token_text
from turnstream.http.a2a.store import TaskRecord, TaskStore
from turnstream.http.a2a.view import ACTED_ON, PAUSED
from turnstream.http.auth import Principal, Scope
from turnstream.http.context import HttpContext
from turnstream.http.hub import Closed, Feed, TokenItem


class ContextSource(Protocol):
    def __call__(self) -> HttpContext: ...


class Tasks:
    """One per app; reads the bus and hub from the app's context at each call."""

    def __init__(self, context: ContextSource) -> None:
        self._context = context
        self._store: TaskStore | None = None

    @property
    def ctx(self) -> HttpContext:
        return self._context()

    @property
    def store(self) -> TaskStore:
        if self._store is None:
            self._store = TaskStore(self.ctx.bus)
        return self._store

    async def load(self, task_id: str, who: Principal, scope: Scope = "read") -> TaskRecord:
        """The task's record, folded up to the end of the log now (and saved if it moved)."""
        record = await self.store.get(task_id)
        if record is None:
            raise TaskNotFoundError(message=f"no task {task_id!r}")
        require(who, scope, record.view.session_id)
        await self.catch_up(record)
        return record

    async def catch_up(self, record: TaskRecord) -> None:
        """Fold the session's events after the record's into it; save it if it moved."""
        view = record.view
        before = view.last_seq
        async for seq, event_type, data in self.ctx.hub.direct.records(
            view.session_id, after=view.last_seq
        ):
            if event_type in ACTED_ON:
                view.feed(seq, decode(data))
            else:
                view.last_seq = max(view.last_seq, seq)
        if view.last_seq != before:
            await self.store.put(record)

    async def follow(
        self,
        record: TaskRecord,
        feed: Feed,
        deadline: float | None,
        until: frozenset[str] = PAUSED,
    ) -> AsyncIterator[TaskRecord | TokenItem]:
        """The task's record each time its state changes, until its state is in `until`
        (or `deadline` passes, or the feed closes); each change is saved. Token deltas of
        the turn too, when the feed carries them."""
        view = record.view
        while view.state not in until:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            try:
                item = await feed.get(left if left is not None else 15.0)
            except Closed:
                return
            if isinstance(item, TokenItem):
                yield item
                continue
            if item is None or item.seq <= view.last_seq:
                continue
            if item.event_type in ACTED_ON:
                changed = view.feed(item.seq, decode(item.data))
            else:
                view.last_seq = item.seq
                changed = False
            if changed:
                await self.store.put(record)
                yield record

    async def stream(
        self, record: TaskRecord, feed: Feed, until: frozenset[str]
    ) -> AsyncIterator[TaskStatusUpdateEvent | TaskArtifactUpdateEvent]:
        """A stream's events: the model's tokens as they come, appended to the `live`
        artifact; each state change as a status update; at the end, the `reply` artifact
        (the whole reply) before the final status."""
        view = record.view
        live = f"{view.turn_id}-live"
        started = False
        async for item in self.follow(record, feed, None, until):
            if isinstance(item, TokenItem):
                delta = token_text(item.data, view.turn_id)
                if delta:
                    yield TaskArtifactUpdateEvent(
                        task_id=view.turn_id,
                        context_id=view.session_id,
                        artifact=Artifact(artifact_id=live, name="live", parts=[Part(text=delta)]),
                        append=started,
                    )
                    started = True
                continue
            task = to_task(item)
            for artifact in task.artifacts:
                yield TaskArtifactUpdateEvent(
                    task_id=task.id, context_id=task.context_id, artifact=artifact, last_chunk=True
                )
            yield TaskStatusUpdateEvent(
                task_id=task.id, context_id=task.context_id, status=task.status
            )
