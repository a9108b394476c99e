"""What A2A push delivery costs and whom it holds up, against the real app, services and
nats-server, with a local webhook receiver (as `test_a2a_push`): the events of tasks
without configs are acknowledged without reading the push bucket (its reads counted on
the broker's API subjects, beside the delivery consumer's progress); a webhook failing
slowly for one task does not delay another task's updates; a config set just before its
task's next change is sent that change."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
from a2a.types.a2a_pb2 import TaskState

from tests.http.conftest import http_app
from tests.http.test_a2a import a2a, message, send
from tests.http.test_a2a_push import Receiver, config, serving, settings, states_of, until
from turnstream.bus import Bus
from turnstream.core.events import PushNotificationAbandoned, TurnEnded
from turnstream.http.a2a.push import PushStore
from turnstream.http.a2a.push_watch import ConfigWatch
from turnstream.http.a2a.pusher import DURABLE, PUSHED_KINDS, Pusher
from turnstream.http.a2a.store import push_bucket_name
from turnstream.http.a2a.view import TurnView
from turnstream.settings import Settings

__all__ = ["settings"]
pytestmark = pytest.mark.integration
S = TaskState
SLOW_S = 1.9
"""Three tries of it outlast the delivery's ack wait (5 s with these settings)."""


class SlowReceiver(Receiver):
    """`/fail-slow…` answers 500 (as any `/fail…`), after `SLOW_S` (a webhook that is
    slow to fail); the rest as `Receiver`."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/fail-slow"):
            await asyncio.sleep(SLOW_S)
        await super().__call__(scope, receive, send)


@pytest.fixture(scope="module")
async def receiver() -> AsyncIterator[SlowReceiver]:
    async with serving(SlowReceiver()) as app:
        yield app


class BucketReads:
    """Every read of the push bucket's entries any client asks the broker for (a KV get
    is a direct get, or a stream message get), counted from a subscription on those API
    subjects."""

    def __init__(self, bus: Bus) -> None:
        self.bus, self.count = bus, 0
        stream = f"KV_{push_bucket_name(bus)}"
        self.subjects = [
            f"$JS.API.DIRECT.GET.{stream}",
            f"$JS.API.DIRECT.GET.{stream}.>",
            f"$JS.API.STREAM.MSG.GET.{stream}",
        ]
        self.subs: list[Any] = []

    async def __aenter__(self) -> BucketReads:
        async def seen(_: Any) -> None:
            self.count += 1

        for subject in self.subjects:
            self.subs.append(await self.bus.nc.subscribe(subject, cb=seen))
        await self.bus.nc.flush()
        return self

    async def __aexit__(self, *_: object) -> None:
        for sub in self.subs:
            await sub.unsubscribe()


async def waiting_task(client: Any, session: str) -> Any:
    """A task of `session` waiting on its prompt (the script's 2nd turn)."""
    await send(client, message("first", context=session))
    waiting = await send(client, message("write it", context=session))
    assert waiting.status.state == S.TASK_STATE_INPUT_REQUIRED
    return waiting


async def pushed_seqs(bus: Bus, session: str) -> list[int]:
    stored = await bus.store.read_session(session)
    return [s.seq for s in stored if s.event.type in PUSHED_KINDS]


async def delivery_past(bus: Bus, seq: int) -> Any:
    """The delivery consumer once it has acknowledged every event up to `seq`."""
    for _ in range(200):
        info = await bus.js.consumer_info(bus.subjects.log_stream, DURABLE)
        if info.ack_floor.stream_seq >= seq and info.num_ack_pending == 0:
            return info
        await asyncio.sleep(0.05)
    raise AssertionError(f"a2a-push did not get past seq {seq}: {info}")


async def test_events_of_tasks_without_configs_read_no_push_config(
    services: Settings, receiver: Receiver, bus: Bus
) -> None:
    async with http_app(services) as url, a2a(url) as client, BucketReads(bus) as reads:
        # a task with a config: its events are read from the bucket (the count counts)
        waiting = await waiting_task(client, "a2a-cost-hooked")
        await client.create_task_push_notification_config(
            config(waiting.id, f"{receiver.url}/hooked", config_id="h1")
        )
        await send(client, message("approve", context="a2a-cost-hooked", task=waiting.id))
        await until(lambda: "TASK_STATE_COMPLETED" in states_of(receiver, "/hooked"))
        before = await delivery_past(bus, max(await pushed_seqs(bus, "a2a-cost-hooked")))
        assert reads.count > 0
        # tasks nobody set a config for: every event delivered and acknowledged, none read
        reads.count = 0
        sessions = [f"a2a-cost-plain-{n}" for n in range(3)]
        for session in sessions:
            await waiting_task(client, session)
        last = max([seq for session in sessions for seq in await pushed_seqs(bus, session)])
        after = await delivery_past(bus, last)
        pushed = sum([len(await pushed_seqs(bus, session)) for session in sessions])
        assert after.delivered.consumer_seq - before.delivered.consumer_seq >= pushed >= 9
        assert reads.count == 0


async def test_a_slow_failing_webhook_does_not_delay_another_tasks_updates(
    services: Settings, receiver: SlowReceiver, bus: Bus
) -> None:
    async with http_app(services) as url, a2a(url) as client:
        a = await waiting_task(client, "a2a-cost-slow")
        b = await waiting_task(client, "a2a-cost-quick")
        await client.create_task_push_notification_config(
            config(a.id, f"{receiver.url}/fail-slow", config_id="a1")
        )
        await client.create_task_push_notification_config(
            config(b.id, f"{receiver.url}/quick", config_id="b1")
        )
        sessions = ["a2a-cost-slow", "a2a-cost-quick"]
        before = await delivery_past(bus, max([max(await pushed_seqs(bus, s)) for s in sessions]))
        await send(client, message("approve", context="a2a-cost-slow", task=a.id))
        await until(lambda: len(receiver.updates("/fail-slow")) >= 1)  # A's first try is in hand
        await send(client, message("approve", context="a2a-cost-quick", task=b.id))
        # A's two updates take 3 tries of SLOW_S each: B's are not behind them
        await until(lambda: "TASK_STATE_COMPLETED" in states_of(receiver, "/quick"), 3 * SLOW_S)
        assert len(receiver.updates("/fail-slow")) < 6
        assert states_of(receiver, "/quick") == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]

        async def abandoned() -> int:
            stored = await bus.store.read_session("a2a-cost-slow")
            return sum(isinstance(s.event, PushNotificationAbandoned) for s in stored)

        for _ in range(400):
            if await abandoned() >= 2:
                break
            await asyncio.sleep(0.05)
        assert await abandoned() == 2
        # A's turn end waited in its queue longer than the ack wait, kept in progress:
        # each event was delivered once
        seqs = [q for s in sessions for q in await pushed_seqs(bus, s)]
        after = await delivery_past(bus, max(seqs))
        since = [q for q in seqs if q > before.ack_floor.stream_seq]
        assert after.delivered.consumer_seq - before.delivered.consumer_seq == len(since)
    # A's own updates in log order, each tried to the end before the next
    assert (
        states_of(receiver, "/fail-slow")
        == ["TASK_STATE_WORKING"] * 3 + ["TASK_STATE_COMPLETED"] * 3
    )


async def test_a_config_set_just_before_its_tasks_next_change_is_sent_it(
    services: Settings, receiver: Receiver
) -> None:
    sessions = [f"a2a-cost-race-{n}" for n in range(4)]
    async with http_app(services) as url, a2a(url) as client:
        tasks = [await waiting_task(client, session) for session in sessions]
        for session, task in zip(sessions, tasks, strict=True):
            hook = f"{receiver.url}/{session}"
            await client.create_task_push_notification_config(config(task.id, hook))
            # the very next thing: the answer that makes the task change
            await send(client, message("approve", context=session, task=task.id))
        for session in sessions:
            await until(lambda s=session: len(receiver.updates(f"/{s}")) >= 2)
        await asyncio.sleep(0.3)
    for session in sessions:
        assert states_of(receiver, f"/{session}") == [
            "TASK_STATE_WORKING",
            "TASK_STATE_COMPLETED",
        ]


async def test_the_index_is_trusted_only_once_it_holds_every_config_written_before(
    services: Settings, bus: Bus
) -> None:
    """The barrier itself: right after a config's write returns, `trusted()` holds until
    the watch has handed it on (without it, the task would be skipped)."""
    store = PushStore(bus)
    watch = ConfigWatch(bus, store)
    stop = asyncio.Event()
    async with asyncio.TaskGroup() as tg:
        tg.create_task(watch.follow(stop))
        await asyncio.wait_for(watch.live.wait(), 10)
        try:
            for n in range(30):
                view = TurnView(f"barrier-{n}", "a2a-cost-barrier")
                await store.change_configs(view, lambda c: c.__setitem__("c", {"url": "x"}))
                assert await watch.trusted()
                assert f"barrier-{n}" in watch.index.tasks
            await store.change_configs(view, lambda c: c.clear())
            assert await watch.trusted()
            assert "barrier-29" not in watch.index.tasks
        finally:
            stop.set()


class InHand:
    """What `Pusher.handle` needs of the message it holds: saying it is in progress."""

    async def in_progress(self) -> None:
        return None


async def test_a_tasks_later_event_handled_first_sends_the_earlier_update_first(
    services: Settings, receiver: Receiver, bus: Bus
) -> None:
    """As when a task's two events are in two replicas' hands: the later one handled
    first sends the earlier update, then its own; the earlier event's delivery (and the
    later's again) then sends nothing."""
    session = "a2a-cost-order"
    async with http_app(services) as url, a2a(url) as client:
        waiting = await waiting_task(client, session)
        await client.create_task_push_notification_config(
            config(waiting.id, f"{receiver.url}/order", config_id="o1")
        )
    # the face is down: the answer and the turn's end are in the log, nobody delivers them
    answer = orjson.dumps(
        {
            "type": "answer",
            "sessionId": session,
            "chatId": session,
            "sender": {"kind": "human", "id": "test"},
            "idempotencyKey": "push-order-answer",
            "interactionId": waiting.status.message.parts[1].data.struct_value["interaction"][
                "interactionId"
            ],
            "decision": "approve",
        }
    )
    await bus.js.publish(bus.subjects.inbound(session), answer)
    ended = None
    for _ in range(200):
        stored = await bus.store.read_session(session)
        ends = [s for s in stored if isinstance(s.event, TurnEnded)]
        ended = next((s for s in ends if s.event.turn_id == waiting.id), None)
        if ended is not None:
            break
        await asyncio.sleep(0.05)
    assert ended is not None
    pusher = Pusher(bus, services, PushStore(bus), "test/1")
    async with httpx.AsyncClient() as pusher.http:
        await pusher.handle(ended.seq, ended.event, InHand())  # the turn's end, first
    assert states_of(receiver, "/order") == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
    async with http_app(services):  # the face: the answer's event, and the end's, again
        await delivery_past(bus, ended.seq)
        await asyncio.sleep(0.3)
    updates = receiver.updates("/order")
    assert [u["status"]["state"] for u in updates] == [
        "TASK_STATE_WORKING",
        "TASK_STATE_COMPLETED",
    ]
    assert updates[-1]["metadata"]["updateId"] == f"{waiting.id}:{ended.seq}"
