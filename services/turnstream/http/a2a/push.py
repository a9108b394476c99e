"""A2A push-notification configs: set, get, list and delete a task's webhooks, kept in
KV (`<prefix>_a2a_push`, one entry per task) so any replica answers and the delivery
(`pusher.Pusher`) finds them.

A task's entry holds its configs (as the client sent them, its `token` included: it is
sent back with every notification) and the delivery's own state: the task's view as of
the last update delivered (`view`) and, per config, the log sequence of the last update
it was sent (`sent`), so a redelivered log event sends no update twice.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from typing import Any

import orjson
from a2a.server.tasks.push_notification_config_store import normalize_push_notification_config
from a2a.types.a2a_pb2 import (
    ListTaskPushNotificationConfigsResponse,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError
from google.protobuf.json_format import MessageToDict, ParseDict  # type: ignore[import-untyped]

from turnstream.bus import Bus
from turnstream.bus.errors import BadRequest, KeyChanged, KeyMissing
from turnstream.http.a2a.push_index import interaction_key
from turnstream.http.a2a.store import LazyBucket, push_bucket_name, valid_key
from turnstream.http.a2a.tasks import Tasks
from turnstream.http.a2a.view import TurnView
from turnstream.http.auth import Principal
from turnstream.http.egress import literal_blocked
from turnstream.settings import Settings

TOKEN_HEADER = "X-A2A-Notification-Token"


@dataclass
class PushEntry:
    view: TurnView
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """By config id: the config as JSON (`TaskPushNotificationConfig`)."""
    sent: dict[str, int] = field(default_factory=dict)
    """By config id: the log sequence of the last update it was sent (or given up on)."""
    revision: int = 0

    def config(self, config_id: str) -> TaskPushNotificationConfig:
        config = TaskPushNotificationConfig()
        ParseDict(self.configs[config_id], config)
        return config

    def to_json(self) -> bytes:
        return orjson.dumps(
            {"view": self.view.to_dict(), "configs": self.configs, "sent": self.sent}
        )

    @classmethod
    def from_json(cls, data: bytes, revision: int) -> PushEntry:
        raw = orjson.loads(data)
        return cls(TurnView.from_dict(raw["view"]), raw["configs"], raw["sent"], revision)


class PushStore:
    """Push entries in KV; the bucket (the setup step's) is opened on first use."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.kv = LazyBucket(bus, push_bucket_name(bus)).kv

    async def get(self, task_id: str) -> PushEntry | None:
        if not valid_key(task_id):
            return None
        try:
            entry = await (await self.kv()).get(task_id)
        except KeyMissing:
            return None
        if not entry.value:
            return None
        return PushEntry.from_json(entry.value, entry.revision)

    async def save(self, entry: PushEntry) -> bool:
        """Write `entry` if nobody wrote it since it was read; False if somebody did."""
        kv = await self.kv()
        try:
            if entry.revision:
                entry.revision = await kv.update(
                    entry.view.turn_id, entry.to_json(), last=entry.revision
                )
            else:
                entry.revision = await kv.create(entry.view.turn_id, entry.to_json())
        except (KeyChanged, BadRequest):
            return False
        return True

    async def save_delivery(self, entry: PushEntry) -> None:
        """Write the delivery's state (`view`, `sent`) of `entry`, keeping the configs a
        client changed meanwhile (theirs are the configs, the delivery's the rest), and
        what another replica delivered meanwhile (a view further on, later `sent`)."""
        while not await self.save(entry):
            stored = await self.get(entry.view.turn_id)
            if stored is None:
                return  # expired: nothing to deliver to any more
            if stored.view.last_seq > entry.view.last_seq:
                entry.view = stored.view
            entry.sent = merged_sent(entry.sent, stored.sent)
            entry.configs, entry.revision = stored.configs, stored.revision

    async def change_configs(self, view: TurnView, change: Any) -> PushEntry:
        """Apply `change(configs)` to the task's configs (its entry made, from `view`, if
        there is none), retried until it is written over the latest entry. An entry left
        without configs is not followed by the delivery (`push_index`): its view is
        `view` again when a config comes back, if that is further on."""
        while True:
            entry = await self.get(view.turn_id) or PushEntry(TurnView.from_dict(view.to_dict()))
            if not entry.configs and view.last_seq > entry.view.last_seq:
                entry.view = TurnView.from_dict(view.to_dict())
            change(entry.configs)
            if await self.save(entry):
                return entry

    async def note_interaction(self, interaction_id: str, task_id: str) -> None:
        await (await self.kv()).put(interaction_key(interaction_id), task_id.encode())

    async def task_of_interaction(self, interaction_id: str) -> str | None:
        try:
            entry = await (await self.kv()).get(interaction_key(interaction_id))
        except KeyMissing:
            return None
        return bytes(entry.value).decode() if entry.value else None


def merged_sent(ours: dict[str, int], theirs: dict[str, int]) -> dict[str, int]:
    """Per config, the later of two deliveries' `sent`."""
    return {k: max(ours.get(k, 0), theirs.get(k, 0)) for k in ours.keys() | theirs.keys()}


def webhook_of(url: str) -> str:
    """`url` without its query and fragment (where a secret may ride): for the log."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(
        (parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", "")
    )


def allowed_url(url: str, settings: Settings) -> bool:
    """Whether a webhook may be called, as far as its URL says: http(s), and, unless
    `TURNSTREAM_A2A_PUSH_ALLOW_PRIVATE`, not an address literal that is private. A name is
    not resolved here (what it resolves to now proves nothing about delivery time): the
    delivery's transport refuses a private peer at connect (`http.egress`)."""
    if settings.a2a_push_allow_private:
        return urllib.parse.urlsplit(url).scheme in ("http", "https")
    return not literal_blocked(url)


class PushConfigs:
    """The four push-notification methods of the A2A handler, over `PushStore`."""

    def __init__(self, tasks: Tasks) -> None:
        self.tasks = tasks
        self._store: PushStore | None = None

    @property
    def store(self) -> PushStore:
        if self._store is None:
            self._store = PushStore(self.tasks.ctx.bus)
        return self._store

    async def create(
        self, params: TaskPushNotificationConfig, who: Principal
    ) -> TaskPushNotificationConfig:
        record = await self.tasks.load(params.task_id, who)
        await self.check_url(params.url)
        config = normalize_push_notification_config(params.task_id, params)
        config.ClearField("tenant")
        body = MessageToDict(config)
        await self.store.change_configs(
            record.view, lambda configs: configs.__setitem__(config.id, body)
        )
        if record.view.interaction is not None:  # its answer will name no task
            interaction_id = record.view.interaction["interactionId"]
            await self.store.note_interaction(interaction_id, record.view.turn_id)
        return config

    async def check_url(self, url: str) -> None:
        """`InvalidParamsError` for a webhook this server may not call (SSRF)."""
        if not allowed_url(url, self.tasks.ctx.settings):
            raise InvalidParamsError(
                message=f"push notification url {webhook_of(url)!r} is not an http(s) "
                "URL of a public address (loopback, private and link-local ones are refused, "
                "and a name resolving to one is refused at delivery; "
                "TURNSTREAM_A2A_PUSH_ALLOW_PRIVATE=true allows them)"
            )

    async def get(self, task_id: str, config_id: str, who: Principal) -> TaskPushNotificationConfig:
        entry = await self._entry(task_id, who)
        if config_id not in entry.configs:
            raise TaskNotFoundError(
                message=f"task {task_id} has no push notification config {config_id!r}"
            )
        return entry.config(config_id)

    async def list(self, task_id: str, who: Principal) -> ListTaskPushNotificationConfigsResponse:
        entry = await self._entry(task_id, who)
        return ListTaskPushNotificationConfigsResponse(
            configs=[entry.config(config_id) for config_id in sorted(entry.configs)]
        )

    async def delete(self, task_id: str, config_id: str, who: Principal) -> None:
        record = await self.tasks.load(task_id, who)
        await self.store.change_configs(record.view, lambda configs: configs.pop(config_id, None))

    async def _entry(self, task_id: str, who: Principal) -> PushEntry:
        record = await self.tasks.load(task_id, who)
        return await self.store.get(task_id) or PushEntry(record.view)


def due(entry: PushEntry, seq: int) -> list[str]:
    """The configs the update at `seq` is still to be sent to (a config sent it, or given
    up on it, before its event came again is not)."""
    return [config_id for config_id in sorted(entry.configs) if entry.sent.get(config_id, 0) < seq]


def headers_for(config: Any) -> dict[str, str]:
    """The client's token back, and its credentials if it gave any (as the SDK's sender)."""
    headers = {TOKEN_HEADER: config.token} if config.token else {}
    auth = config.authentication
    if config.HasField("authentication") and auth.scheme and auth.credentials:
        headers["Authorization"] = f"{auth.scheme} {auth.credentials}"
    return headers
