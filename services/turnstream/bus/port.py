"""The bus as the services, the HTTP face and the CLI see it: one connection and the typed
operations they need of JetStream (`Bus`). Nothing outside `bus/` touches nats-py's
JetStream context: each operation here is the library call itself, or the helper of the
module where that thing lives (`scan`, `consume`, `full`, `streams`), bound to this
connection; nothing is added on the way.

| what | where |
|---|---|
| append, read a session, scan and count the log | `bus.store` (`bus/store.py`) |
| KV buckets | `key_value`, `existing_bucket`; writes in a flight: `bus/kv.py` |
| object stores | `blobs`, `attachments`, `object_store`; reads: `bus/objects.py` |
| durables (push, pull) and ordered consumers | `log_push`, `bind_push`, `pull_bind`, `follow` |
| streams and consumers asked about | `stream_info`, `consumer_info`, `stream_usage` |
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from nats.aio.client import Client
from nats.js import JetStreamContext, api
from nats.js.kv import KeyValue as KeyValue  # typed handles the services hold
from nats.js.object_store import ObjectStore as ObjectStore

from turnstream.bus import consume, full, ordered, streams
from turnstream.bus.durables import Durable, bound_config
from turnstream.bus.permissions import Refusals
from turnstream.bus.store import JetStreamEventStore
from turnstream.core.subjects import Subjects

OnMsg = Callable[[Any], Awaitable[None]]
PullSubscription = JetStreamContext.PullSubscription


@dataclass
class Bus:
    """One NATS connection with its JetStream context and the event store over it."""

    nc: Client
    js: JetStreamContext
    subjects: Subjects
    refusals: Refusals = field(default_factory=lambda: Refusals(None))
    """What the server refused this connection's user (a publish, a subscription)."""
    store: JetStreamEventStore = field(init=False)
    _blobs: ObjectStore | None = field(default=None, init=False, repr=False)
    _attachments: ObjectStore | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.store = JetStreamEventStore(self.nc, self.js, self.subjects)

    async def blobs(self) -> ObjectStore:
        """The object store of large results and archived sessions (looked up once)."""
        if self._blobs is None:
            self._blobs = await self.js.object_store(self.subjects.blobs_bucket)
        return self._blobs

    async def attachments(self) -> ObjectStore:
        """The object store of the files messages carry (looked up once)."""
        if self._attachments is None:
            self._attachments = await self.js.object_store(self.subjects.attachments_bucket)
        return self._attachments

    async def object_store(self, bucket: str) -> ObjectStore:
        return await self.js.object_store(bucket)

    async def key_value(self, bucket: str) -> KeyValue:
        """The KV bucket `bucket` (`BucketMissing` when there is none)."""
        return await self.js.key_value(bucket)

    async def existing_bucket(self, bucket: str) -> KeyValue:
        """The bucket the setup step made; `StreamsMissing` naming that step when it did not."""
        kv: KeyValue = await streams.existing_bucket(self.js, bucket)
        return kv

    async def publish(
        self, subject: str, payload: bytes, *, headers: dict[str, str] | None = None
    ) -> api.PubAck:
        """Publish to a stream's subject and wait for its ack (`JetStreamError` if refused)."""
        return await self.js.publish(subject, payload, headers=headers)

    async def publish_permitted(
        self, subject: str, payload: bytes, *, headers: dict[str, str] | None = None
    ) -> api.PubAck:
        """`publish`, with `PermissionDenied` as soon as the server refuses this user it."""
        ack: api.PubAck = await self.refusals.publish(self.js, subject, payload, headers=headers)
        return ack

    async def stream_info(self, stream: str) -> api.StreamInfo:
        """The stream's config and state (`NotFound` when there is no such stream)."""
        return await self.js.stream_info(stream)

    async def consumer_info(
        self, stream: str, consumer: str, *, timeout: float | None = None
    ) -> api.ConsumerInfo:
        info: api.ConsumerInfo = await self.js.consumer_info(stream, consumer, timeout=timeout)
        return info

    async def stream_usage(self, names: list[str] | None = None) -> dict[str, Any]:
        """How full each stream is (`full.stream_usage`)."""
        return await full.stream_usage(self.js, self.subjects, names)

    async def storage_usage(self) -> dict[str, Any]:
        """`stream_usage` and every running process's alarm (`full.storage_usage`)."""
        return await full.storage_usage(self.nc, self.js, self.subjects)

    async def noted_at_limit(self, streams: list[str], subject: str) -> bool:
        """Whether a stream of `streams` or the account is at its storage limit, the alarm
        raised if so (`full.noted_at_limit`)."""
        return await full.noted_at_limit(self.js, streams, subject)

    async def log_push(
        self, durable: Durable, on_msg: OnMsg, *, partitions: Iterable[int] | None = None
    ) -> consume.Subscriptions:
        """Bound to the log durable `durable` on each log stream (`consume.log_push`)."""
        return await consume.log_push(
            self.js, self.subjects, durable, on_msg, partitions=partitions
        )

    async def bind_push(
        self, durable: Durable, stream: str, partition: int | None, on_msg: OnMsg
    ) -> Any:
        """Bound to the push durable `durable` on `stream` (`consume.bind_push`)."""
        return await consume.bind_push(self.js, self.subjects, durable, stream, partition, on_msg)

    async def bound_config(
        self, durable: Durable, stream: str, partition: int | None
    ) -> api.ConsumerConfig:
        """The config of the durable the setup step made (`durables.bound_config`)."""
        config: api.ConsumerConfig = await bound_config(
            self.js, self.subjects, durable, stream, partition
        )
        return config

    async def pull_bind(self, durable: str, stream: str) -> PullSubscription:
        """Bound to the existing pull durable `durable` of `stream`."""
        return await self.js.pull_subscribe_bind(durable, stream=stream)

    async def follow(
        self,
        stream: str,
        on_msg: OnMsg,
        *,
        subject: str | None = None,
        filter_subjects: list[str] | None = None,
        **options: Any,
    ) -> Any:
        """An ordered consumer of what `stream` gets from now on, on `subject` or on
        `filter_subjects` (`ordered.ordered_subscribe`); `NotFound` without the stream."""
        config = api.ConsumerConfig(deliver_policy=api.DeliverPolicy.NEW)
        if filter_subjects is not None:
            config.filter_subjects = filter_subjects
        return await ordered.ordered_subscribe(
            self.js, subject, stream=stream, cb=on_msg, config=config, **options
        )

    async def close(self) -> None:
        """Drain and close; with the broker away (no drain possible), just close."""
        if self.nc.is_closed:
            return
        if self.nc.is_connecting or self.nc.is_reconnecting:
            # nats-py writes what it buffered for the server to the lost socket on close
            # and raises for it; the connection is closed all the same
            with contextlib.suppress(OSError):
                await self.nc.close()
            return
        await self.nc.drain()
