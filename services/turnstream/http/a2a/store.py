"""The A2A task store: one JetStream KV entry per task, so any HTTP replica answers for any
task (the app itself keeps none in memory).

A task is a turn; its entry (`<prefix>_a2a_tasks`, key = the turn id) holds the `TurnView`
folded up to some log sequence and the A2A messages the client sent for it. The log stays
the truth: a reader folds the session's events after `view.last_seq` before answering, and
writes the entry back only if nobody wrote a newer one meanwhile (compare-and-set on the
KV revision; a lost race is harmless, the next reader folds the same events again).
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field
from typing import Any

import orjson

from turnstream.bus import Bus
from turnstream.bus.errors import BadRequest, KeyChanged, KeyMissing, NoKeys
from turnstream.bus.streams import a2a_push_bucket, a2a_tasks_bucket
from turnstream.http.a2a.view import TurnView

MESSAGE_KEY = "msg."
"""Entries under this prefix are not tasks: `msg.<sha256 of a messageId>` names the
context the message first ran in."""


def bucket_name(bus: Bus) -> str:
    return a2a_tasks_bucket(bus.subjects.prefix)


def push_bucket_name(bus: Bus) -> str:
    """The A2A push-notification configs (`http/a2a/push.py`), one entry per task."""
    return a2a_push_bucket(bus.subjects.prefix)


class LazyBucket:
    """One of the HTTP face's two buckets (tasks, push configs), which the setup step
    created (`bus/streams.bucket_configs`), opened by whoever asks first."""

    def __init__(self, bus: Bus, name: str) -> None:
        self.bus, self.name = bus, name
        self._kv: Any = None
        self._lock = asyncio.Lock()

    async def kv(self) -> Any:
        if self._kv is None:
            async with self._lock:
                if self._kv is None:
                    self._kv = await self.bus.existing_bucket(self.name)
        return self._kv


@dataclass
class TaskRecord:
    view: TurnView
    messages: list[dict[str, Any]] = field(default_factory=list)
    """The A2A messages (JSON) the client sent for this task, oldest first."""
    owner: str = ""
    """The key name that created the task (for the record; access is by session glob)."""
    revision: int = 0
    """The KV revision this record was read at (0: not stored yet)."""

    def to_json(self) -> bytes:
        return orjson.dumps(
            {"view": self.view.to_dict(), "messages": self.messages, "owner": self.owner}
        )

    @classmethod
    def from_json(cls, data: bytes, revision: int) -> TaskRecord:
        raw = orjson.loads(data)
        return cls(TurnView.from_dict(raw["view"]), raw["messages"], raw["owner"], revision)


class TaskStore:
    """Tasks in KV; the bucket (the setup step's) is opened on first use."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.kv = LazyBucket(bus, bucket_name(bus)).kv

    async def get(self, task_id: str) -> TaskRecord | None:
        if not valid_key(task_id):
            return None
        kv = await self.kv()
        try:
            entry = await kv.get(task_id)
        except KeyMissing:
            return None
        if not entry.value:  # nats-py: an expired key reads as a `None` value
            return None
        return TaskRecord.from_json(entry.value, entry.revision)

    async def all(self) -> list[TaskRecord]:
        """Every task in the bucket (ListTasks pages through them)."""
        kv = await self.kv()
        try:
            keys = await kv.keys()
        except NoKeys:
            return []
        tasks = [key for key in keys if not key.startswith(MESSAGE_KEY)]
        found = await asyncio.gather(*(self.get(key) for key in tasks))
        return [record for record in found if record is not None]

    async def claim_message(self, message_id: str, session: str) -> tuple[str, bool]:
        """The session the message `message_id` runs in, and whether this is its first
        sending: `session` and True, unless the same message was sent before (a client's
        retry): then the session it first ran in and False."""
        kv = await self.kv()
        key = MESSAGE_KEY + hashlib.sha256(message_id.encode()).hexdigest()
        try:
            await kv.create(key, session.encode())
        except (BadRequest, KeyChanged):  # the key exists: a retry
            entry = await kv.get(key)
            if entry.value:
                return bytes(entry.value).decode(), False
            await kv.put(key, session.encode())  # expired meanwhile: this one is first
        return session, True

    async def put(self, record: TaskRecord) -> None:
        """Write `record`; if another replica wrote the entry meanwhile, merge: the view
        folded furthest wins (both fold the same log), the client's messages are the union
        (by messageId). A few tries, then the next writer carries on."""
        for _ in range(3):
            if await self.save(record):
                return
            stored = await self.get(record.view.turn_id)
            if stored is None:
                record.revision = 0
                continue
            if stored.view.last_seq > record.view.last_seq:
                # in place: a caller folding into `record.view` goes on from there
                vars(record.view).update(vars(stored.view))
            seen = {m.get("messageId") for m in stored.messages}
            record.messages = stored.messages + [
                m for m in record.messages if m.get("messageId") not in seen
            ]
            record.revision = stored.revision

    async def save(self, record: TaskRecord) -> bool:
        """Write `record` if the entry is still at `record.revision`; False if another
        replica wrote first (the record is then re-read by whoever needs it)."""
        kv = await self.kv()
        key = record.view.turn_id
        try:
            if record.revision:
                record.revision = await kv.update(key, record.to_json(), last=record.revision)
            else:
                record.revision = await kv.create(key, record.to_json())
        except KeyChanged:
            return False
        except BadRequest:  # create: the key exists (a retried SendMessage)
            return False
        return True


def valid_key(key: str) -> bool:
    return bool(key) and len(key) <= 256 and all(c.isalnum() or c in "-_=" for c in key)
