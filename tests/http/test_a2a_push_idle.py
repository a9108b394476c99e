"""A2A push delivery while no task has a config, against the real app, services and
nats-server (as `test_a2a_push`): the delivery consumer is not pulled from (no fetch
request reaches the broker, nothing is delivered or acknowledged); a config set after many
events moves it past them in one step and gets its task's later updates, each once; a
consumer left by an older version (deliver new) is replaced after its acknowledgement
floor, so nothing is skipped."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from nats.js import api

from tests.http.conftest import http_app
from tests.http.test_a2a import a2a, message, send
from tests.http.test_a2a_push import Receiver, config, serving, settings, states_of, until
from tests.http.test_a2a_push_cost import delivery_past, pushed_seqs, waiting_task
from turnstream.bus import Bus
from turnstream.bus.durables import ensure_durables
from turnstream.http.a2a.push_consumer import skip_to
from turnstream.http.a2a.pusher import DURABLE, PUSHED_KINDS
from turnstream.settings import Settings

__all__ = ["settings"]
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
async def receiver() -> AsyncIterator[Receiver]:
    async with serving(Receiver()) as app:
        yield app


class Pulls:
    """Every fetch request any client sends the delivery consumer, counted on its API
    subject."""

    def __init__(self, bus: Bus) -> None:
        self.bus, self.count, self.sub = bus, 0, None
        self.subject = f"$JS.API.CONSUMER.MSG.NEXT.{bus.subjects.log_stream}.{DURABLE}"

    async def __aenter__(self) -> Pulls:
        async def seen(_: Any) -> None:
            self.count += 1

        self.sub = await self.bus.nc.subscribe(self.subject, cb=seen)
        await self.bus.nc.flush()
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self.sub is not None
        await self.sub.unsubscribe()


async def consumer(bus: Bus) -> Any:
    return await bus.js.consumer_info(bus.subjects.log_stream, DURABLE)


async def test_without_any_config_the_delivery_consumer_is_not_pulled_from(
    services: Settings, bus: Bus
) -> None:
    sessions = [f"a2a-idle-{n}" for n in range(3)]
    async with http_app(services) as url, a2a(url) as client, Pulls(bus) as pulls:
        before = await consumer(bus)
        for session in sessions:
            await waiting_task(client, session)
        await asyncio.sleep(1.5)  # three fetches' expiry, were it fetching
        after = await consumer(bus)
    pushed = sum([len(await pushed_seqs(bus, session)) for session in sessions])
    assert pushed >= 9
    assert pulls.count == 0
    assert after.delivered.consumer_seq == before.delivered.consumer_seq
    assert after.ack_floor.stream_seq == before.ack_floor.stream_seq
    assert after.num_ack_pending == 0
    assert after.num_pending >= before.num_pending + pushed  # kept for a config to come


async def test_a_config_set_after_many_events_gets_only_its_tasks_later_updates_once(
    services: Settings, receiver: Receiver, bus: Bus
) -> None:
    async with http_app(services) as url, a2a(url) as client:
        for n in range(4):  # events nobody will want
            await waiting_task(client, f"a2a-idle-before-{n}")
        waiting = await waiting_task(client, "a2a-idle-hooked")
        before = await consumer(bus)
        backlog = before.num_pending
        assert backlog >= 15
        await client.create_task_push_notification_config(
            config(waiting.id, f"{receiver.url}/idle-hooked", config_id="i1")
        )
        await send(client, message("approve", context="a2a-idle-hooked", task=waiting.id))
        await until(lambda: "TASK_STATE_COMPLETED" in states_of(receiver, "/idle-hooked"))
        last = max(await pushed_seqs(bus, "a2a-idle-hooked"))
        after = await delivery_past(bus, last)
        await asyncio.sleep(0.5)
    # the backlog was passed over, not fetched: only the hooked task's later events came
    fetched = after.delivered.consumer_seq - before.delivered.consumer_seq
    later = [
        q for q in await pushed_seqs(bus, "a2a-idle-hooked") if q > before.delivered.stream_seq
    ]
    assert fetched < backlog and fetched <= len(later)
    updates = receiver.updates("/idle-hooked")
    assert [u["status"]["state"] for u in updates] == [
        "TASK_STATE_WORKING",
        "TASK_STATE_COMPLETED",
    ]
    assert len({u["metadata"]["updateId"] for u in updates}) == 2


async def test_the_setup_step_replaces_an_older_deliver_new_consumer_after_its_ack_floor(
    services: Settings, bus: Bus
) -> None:
    stream = bus.subjects.log_stream
    await bus.js.delete_consumer(stream, DURABLE)
    older = api.ConsumerConfig(
        durable_name=DURABLE,
        deliver_policy=api.DeliverPolicy.NEW,
        filter_subjects=[bus.subjects.log("*", kind) for kind in sorted(PUSHED_KINDS)],
        ack_policy=api.AckPolicy.EXPLICIT,
    )
    await bus.js.add_consumer(stream, config=older)
    floor = (await consumer(bus)).ack_floor.stream_seq
    await ensure_durables(bus.js, bus.subjects, services.a2a_push_timeout_s)
    async with http_app(services):
        info = await consumer(bus)
    assert info.config.deliver_policy == api.DeliverPolicy.BY_START_SEQUENCE
    assert info.config.opt_start_seq == floor + 1


async def test_a_consumer_the_server_will_not_move_is_left_to_be_fetched(
    services: Settings, bus: Bus
) -> None:
    stream = bus.subjects.log_stream
    unmovable = api.ConsumerConfig(  # deliver new: JetStream refuses to reset it
        durable_name="a2a-push-unmovable",
        deliver_policy=api.DeliverPolicy.NEW,
        filter_subjects=[bus.subjects.log("*", "TurnEnded")],
        ack_policy=api.AckPolicy.EXPLICIT,
    )
    await bus.js.add_consumer(stream, config=unmovable)
    last = (await bus.js.stream_info(stream)).state.last_seq
    try:
        assert not await skip_to(bus, stream, "a2a-push-unmovable", last + 100)
        info = await bus.js.consumer_info(stream, "a2a-push-unmovable")
        assert info.delivered.stream_seq <= last
    finally:
        await bus.js.delete_consumer(stream, "a2a-push-unmovable")
