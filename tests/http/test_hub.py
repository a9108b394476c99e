"""The hub's sources against a real nats-server: a waiting POST's feed is not sent every
event, a source goes once its last feed has been closed a while, and one started again
misses nothing appended after its feed opened."""

from __future__ import annotations

import asyncio

import pytest

from tests.http.test_sse import marker
from turnstream.bus import Bus
from turnstream.core.follow import FOLLOWED_TYPES
from turnstream.http.direct import LogRecord
from turnstream.http.hub import Feed, Hub

pytestmark = pytest.mark.integration
VERDICTS = ", ".join(sorted(FOLLOWED_TYPES))


async def next_record(feed: Feed) -> LogRecord:
    item = await feed.get(5)
    assert isinstance(item, LogRecord), item
    return item


async def test_a_waiting_post_follows_only_the_types_it_reads(bus: Bus) -> None:
    hub = Hub(bus, linger_s=60)
    try:
        async with hub.feed("hub-post", kinds=FOLLOWED_TYPES) as feed:
            assert hub.following == [VERDICTS] and not hub.started
            await bus.store.append_facts([marker("hub-post", 0)])  # a type it does not read
            assert await feed.get(0.3) is None
        async with hub.feed("hub-post") as stream:  # a stream: every event
            assert hub.following == sorted(["every event", VERDICTS]) and hub.started
            await bus.store.append_facts([marker("hub-post", 1)])
            assert (await next_record(stream)).event_type == "StagePreFired"
    finally:
        await hub.stop()
    assert hub.following == []


async def test_a_source_goes_after_its_last_feed_and_comes_back_whole(bus: Bus) -> None:
    hub = Hub(bus, linger_s=0.3)
    try:
        async with hub.feed("hub-linger", tokens=True):
            pass
        async with hub.feed("hub-linger"):  # reopened within the linger: the same source
            assert hub.following == ["every event", "live tokens"]
        await asyncio.sleep(0.6)
        assert hub.following == []
        async with hub.feed("hub-linger") as feed:  # started again
            await bus.store.append_facts([marker("hub-linger", 2)])
            record = await next_record(feed)
            assert record.event_type == "StagePreFired" and record.seq > 0
    finally:
        await hub.stop()
