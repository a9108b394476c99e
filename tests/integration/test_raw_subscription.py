"""bus/raw.raw_subscribe: messages handed over as the connection parses them, the same as
nats-py's callback would see them, the connection's other subscriptions untouched."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from turnstream.bus import Bus, raw
from turnstream.bus.raw import Delivery, raw_subscribe

HEADERS = {"Nats-Msg-Id": "m-1", "traceparent": "00-abc-def-01", "Empty": ""}


class Seen:
    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self.arrived = asyncio.Event()

    def __call__(self, delivery: Delivery) -> None:
        self.deliveries.append(delivery)
        self.arrived.set()

    async def next(self) -> Delivery:
        await asyncio.wait_for(self.arrived.wait(), 5)
        self.arrived.clear()
        return self.deliveries[-1]


def test_the_pinned_nats_py_is_the_one_routed() -> None:
    assert raw._checked_library_route()


@pytest.mark.parametrize("routed", [True, False])
async def test_a_message_comes_as_a_plain_subscription_sees_it(
    bus: Bus, routed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(raw, "LIBRARY_ROUTE", routed)
    nc = bus.nc
    subject = nc.new_inbox()
    plain: asyncio.Queue[Any] = asyncio.Queue()

    async def on_plain(msg: Any) -> None:
        await plain.put(msg)

    seen = Seen()
    sub = await raw_subscribe(nc, subject, seen)
    other = await nc.subscribe(subject, cb=on_plain)
    try:
        await nc.publish(subject, b"payload", reply="the.reply", headers=dict(HEADERS))
        got, msg = await seen.next(), await asyncio.wait_for(plain.get(), 5)
        assert (got.subject, got.reply, got.data) == (msg.subject, msg.reply, msg.data)
        assert got.headers == msg.headers == HEADERS
        assert got.status == ""
        await nc.publish(subject, b"no headers")
        got, msg = await seen.next(), await asyncio.wait_for(plain.get(), 5)
        assert (got.data, got.reply, got.headers) == (b"no headers", "", None)
        assert (msg.data, msg.reply, msg.headers) == (b"no headers", "", None)
        assert sub.routed is routed
        # routed: nats-py's own handling of the subscription (its count, its Msg) is passed by
        assert sub.sub.delivered == (0 if routed else 2)
        assert other.delivered == 2
    finally:
        await sub.unsubscribe()
        await other.unsubscribe()


@pytest.mark.parametrize("routed", [True, False])
async def test_a_status_message_has_its_code(
    bus: Bus, routed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(raw, "LIBRARY_ROUTE", routed)
    inbox = bus.nc.new_inbox()
    seen = Seen()
    sub = await raw_subscribe(bus.nc, inbox, seen)
    try:
        await bus.nc.publish(bus.nc.new_inbox(), b"anyone?", reply=inbox)  # no responders
        got = await seen.next()
        assert (got.status, got.reply, got.data) == ("503", "", b"")
    finally:
        await sub.unsubscribe()


async def test_a_failing_handler_stops_neither_it_nor_the_connection(bus: Bus) -> None:
    subject = bus.nc.new_inbox()
    seen = Seen()

    def handler(delivery: Delivery) -> None:
        seen(delivery)
        if delivery.data == b"bad":
            raise ValueError("a bug in the handler")

    sub = await raw_subscribe(bus.nc, subject, handler)
    try:
        await bus.nc.publish(subject, b"bad")
        await bus.nc.publish(subject, b"good")
        while len(seen.deliveries) < 2:
            await seen.next()
        assert [d.data for d in seen.deliveries] == [b"bad", b"good"]
        assert (await bus.nc.request("$JS.API.INFO", b"", timeout=5)).data  # still answers
    finally:
        await sub.unsubscribe()


async def test_after_unsubscribe_nothing_more_comes(bus: Bus) -> None:
    subject = bus.nc.new_inbox()
    seen = Seen()
    sub = await raw_subscribe(bus.nc, subject, seen)
    await bus.nc.publish(subject, b"one")
    await seen.next()
    await sub.unsubscribe()
    await bus.nc.publish(subject, b"two")
    await bus.nc.flush()
    await asyncio.sleep(0.2)
    assert [d.data for d in seen.deliveries] == [b"one"]
