"""Which tasks have push configs, known locally (pure: no I/O), so the delivery
(`pusher.Pusher`) acknowledges the events of every other task without reading KV.

Each replica follows the push bucket (`<prefix>_a2a_push`) with a KV watch and applies
each entry here (`apply`): a task's entry with at least one config puts it in `tasks`, an
entry without (all deleted) or a delete takes it out; an `i.<hash>` entry names the task
an interaction's answer belongs to (`interactions`: an answer's event carries no turn id).

`applied` is the bucket's stream sequence the index is current to. A skip is trusted only
when `applied` is at least the bucket's last sequence read *after* the event was fetched
(`Pusher`'s barrier): a config written before the event was appended to the log (the
client's call returned, then the task changed) has a lower sequence in the bucket than
that, so it is in the index by then. Nothing else orders the two streams.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import orjson

from turnstream.core.events import Event, InteractionAnswered, InteractionRequested

INTERACTION_KEY = "i."
"""`i.<sha256 of an interaction id>` names the task whose prompt it is."""
GONE = ("DEL", "PURGE")


def interaction_key(interaction_id: str) -> str:
    return INTERACTION_KEY + hashlib.sha256(interaction_id.encode()).hexdigest()


@dataclass
class PushIndex:
    tasks: set[str] = field(default_factory=set)
    """Tasks with at least one push config."""
    interactions: dict[str, str] = field(default_factory=dict)
    """By `interaction_key`: the task whose prompt it is."""
    applied: int = 0
    """The bucket's stream sequence the index is current to."""

    @property
    def empty(self) -> bool:
        """No task has a config and no prompt is noted: no event has anything to send."""
        return not self.tasks and not self.interactions

    def apply(self, key: str, value: bytes | None, operation: str | None, revision: int) -> None:
        """One entry of the bucket as the watch hands it on (a value, or a delete)."""
        self.applied = max(self.applied, revision)
        gone = operation in GONE or not value
        if key.startswith(INTERACTION_KEY):
            if gone:
                self.interactions.pop(key, None)
            else:
                self.interactions[key] = bytes(value or b"").decode()
        elif gone or not _has_configs(value or b""):
            self.tasks.discard(key)
        else:
            self.tasks.add(key)

    def caught_up(self, seq: int) -> None:
        """The watch has handed on every entry up to `seq` (its first values are done)."""
        self.applied = max(self.applied, seq)

    def current(self, last_seq: int) -> bool:
        return self.applied >= last_seq

    def task_of(self, event: Event) -> str | None:
        """The task `event` may change whose updates someone wants sent; None: nobody's.
        An interaction asked for in such a task is remembered (its answer names no task;
        the delivery writes its `i.` entry for the other replicas and for after a restart)."""
        if isinstance(event, InteractionAnswered):
            return self.interactions.get(interaction_key(event.data.interaction_id))
        task = event.turn_id
        if not task or task not in self.tasks:
            return None
        if isinstance(event, InteractionRequested):
            self.interactions[interaction_key(event.data.interaction_id)] = task
        return task


def wanted(index: PushIndex, raw: dict[str, Any]) -> bool:
    """Whether an event, as its JSON, may concern a task with a config (`task_of` may name
    one): what the delivery reads of another task's event, instead of decoding it."""
    kind = raw.get("type")
    if kind == "InteractionAnswered":
        data = raw.get("data")
        answered = data.get("interactionId") if isinstance(data, dict) else None
        return not isinstance(answered, str) or interaction_key(answered) in index.interactions
    return kind is None or raw.get("turnId") in index.tasks


def _has_configs(value: bytes) -> bool:
    try:
        return bool(orjson.loads(value).get("configs"))
    except (orjson.JSONDecodeError, AttributeError):
        return False
