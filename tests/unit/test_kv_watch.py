"""Following a KV bucket outlives a bucket that does not answer for a while."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from turnstream.bus import kv


class Watcher:
    def __init__(self, entries: list[Any], stop: asyncio.Event) -> None:
        self.entries, self.stop_event, self.stopped = list(entries), stop, False

    async def updates(self, timeout: float) -> Any:
        if self.entries:
            return self.entries.pop(0)
        self.stop_event.set()
        raise TimeoutError  # nats-py's own timeout type is also named so

    async def stop(self) -> None:
        self.stopped = True


async def test_a_watch_that_cannot_start_is_retried_until_the_bucket_answers(monkeypatch) -> None:
    monkeypatch.setattr(kv, "RETRY_S", 0.01)
    stop = asyncio.Event()
    entry = SimpleNamespace(key="k", value=b"v")
    watcher = Watcher([entry], stop)
    attempts: list[int] = []

    async def open_kv() -> Any:
        attempts.append(1)
        if len(attempts) < 3:
            raise TimeoutError("nats: timeout")  # e.g. a cluster electing a leader

        async def watch(keys: str) -> Watcher:
            assert keys == ">"  # every key, unless the caller narrows it
            return watcher

        return SimpleNamespace(watch=watch)

    seen: list[Any] = []
    await asyncio.wait_for(kv.watch(open_kv, stop, seen.append, "test"), 5)
    assert len(attempts) == 3 and seen == [entry] and watcher.stopped


async def test_a_bucket_the_cluster_cannot_place_yet_is_asked_for_again(monkeypatch) -> None:
    from nats.js.errors import BadRequestError, BucketNotFoundError

    monkeypatch.setattr(kv, "RETRY_S", 0.01)
    created: list[int] = []

    class Js:
        async def key_value(self, bucket: str) -> Any:
            raise BucketNotFoundError

        async def create_key_value(self, config: Any) -> Any:
            created.append(1)
            if len(created) < 3:  # a node of the cluster still joining
                raise BadRequestError(code=400, err_code=10005, description="peer offline")
            return "bucket"

    config = SimpleNamespace(bucket="b")
    assert await asyncio.wait_for(kv.open_or_create(Js(), config), 5) == "bucket"
    assert len(created) == 3


async def test_streams_the_cluster_cannot_place_yet_are_asked_for_again(monkeypatch) -> None:
    """At start-up too, not only for the buckets opened later (`bus.connection`)."""
    from nats.js.errors import BadRequestError

    from turnstream.bus import connection
    from turnstream.bus.streams import StreamLimits
    from turnstream.core.subjects import Subjects

    tries: list[int] = []

    async def ensure_streams(js: Any, subjects: Any, limits: Any) -> None:
        tries.append(1)
        if len(tries) < 3:
            raise BadRequestError(code=400, err_code=10005, description="peer offline")

    async def ensure_durables(js: Any, subjects: Any, push_timeout_s: float) -> None:
        pass

    monkeypatch.setattr(connection, "ensure_streams", ensure_streams)
    monkeypatch.setattr(connection, "ensure_durables", ensure_durables)
    await connection._ensure_within(None, Subjects("ts"), StreamLimits(), 5)
    assert len(tries) == 3


async def test_a_stream_the_cluster_cannot_place_is_not_taken_for_one_that_exists() -> None:
    """`add_stream` answers 400 both for "exists" (then update it) and for "cannot place"
    (then the update finds no stream: 404, which no retry waits for). The second must reach
    `retried` as it came."""
    from nats.js.errors import BadRequestError

    from turnstream.bus.retry import cannot_place
    from turnstream.bus.streams import StreamLimits, ensure_streams
    from turnstream.core.subjects import Subjects

    updated: list[Any] = []

    class Js:
        async def stream_info(self, name: str) -> Any:
            from nats.js.errors import NotFoundError

            raise NotFoundError

        async def add_stream(self, config: Any) -> Any:
            raise BadRequestError(code=400, err_code=10005, description="no suitable peers")

        async def update_stream(self, config: Any) -> Any:
            updated.append(config)

    with pytest.raises(BadRequestError) as raised:
        await ensure_streams(Js(), Subjects("ts"), StreamLimits())
    assert cannot_place(raised.value) and updated == []
