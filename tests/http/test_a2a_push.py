"""A2A push notifications with the SDK's clients against the real app, services and
nats-server, and a local HTTP server in the test as the client's webhook: configs set,
read, listed and deleted over both bindings; each task update POSTed once from the log,
across a restart of the HTTP process; a failing webhook retried, then given up with an
event in the log; a webhook on a private address refused unless a setting allows it."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
import orjson
import pytest
import uvicorn
from a2a.types.a2a_pb2 import (
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from starlette.requests import Request
from starlette.responses import Response

from tests.http.conftest import http_app
from tests.http.test_a2a import ERRORS, a2a, message, send
from tests.integration.partitioned import log_partitions_1_and_4  # noqa: F401 (fixture)
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.core.events import PushNotificationAbandoned, TurnEnded
from turnstream.settings import Settings

pytestmark = pytest.mark.integration
S = TaskState
CARD = "/.well-known/agent-card.json"


@pytest.fixture(scope="module")
def settings(settings: Settings) -> Settings:
    return settings.model_copy(
        update={
            "a2a_push_allow_private": True,  # the webhook is on loopback, in this test
            "a2a_push_attempts": 3,
            "a2a_push_backoff_s": 0.05,
            "a2a_push_timeout_s": 2.0,
        }
    )


@dataclass
class Receiver:
    """The client's webhook: records every POST; `/fail/…` answers 500."""

    url: str = ""
    posts: list[tuple[str, dict[str, str], dict[str, Any]]] = field(default_factory=list)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        body = orjson.loads(await request.body())
        self.posts.append((request.url.path, dict(request.headers), body))
        status = 500 if request.url.path.startswith("/fail") else 200
        await Response(status_code=status)(scope, receive, send)

    def updates(self, path: str) -> list[dict[str, Any]]:
        return [body["statusUpdate"] for p, _, body in self.posts if p == path]


R = TypeVar("R", bound=Receiver)


@asynccontextmanager
async def serving(app: R) -> AsyncIterator[R]:
    """`app` served on a free loopback port (its `url` set) while inside."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    app.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False))
    task = asyncio.create_task(server.serve([sock]))
    try:
        yield app
    finally:
        server.should_exit = True
        await task


@pytest.fixture(scope="module")
async def receiver(log_partitions: int) -> AsyncIterator[Receiver]:
    """One per module's server (the module runs at 1 and 4 log partitions)."""
    async with serving(Receiver()) as app:
        yield app


def config(task_id: str, url: str, token: str = "", config_id: str = "") -> Any:
    return TaskPushNotificationConfig(task_id=task_id, id=config_id, url=url, token=token)


async def until(check: Any, within_s: float = 10.0) -> None:
    for _ in range(int(within_s / 0.05)):
        if check():
            return
        await asyncio.sleep(0.05)
    assert check()


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_configs_are_set_read_listed_and_deleted(
    services: Settings, receiver: Receiver, binding: str
) -> None:
    async with http_app(services) as url, a2a(url, binding=binding) as client:
        async with httpx.AsyncClient(base_url=url, headers={"A2A-Version": "1.0"}) as http:
            card = (await http.get(CARD)).json()
        assert card["capabilities"]["pushNotifications"] is True
        task = await send(client, message("hi", context=f"a2a-push-cfg-{binding[:4]}"))
        made = await client.create_task_push_notification_config(
            config(task.id, f"{receiver.url}/cfg", token="tok-cfg", config_id="c1")
        )
        assert (made.id, made.task_id, made.token) == ("c1", task.id, "tok-cfg")
        got = await client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task.id, id="c1")
        )
        assert got.url == f"{receiver.url}/cfg" and got.token == "tok-cfg"
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        assert [c.id for c in listed.configs] == ["c1"]
        await client.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="c1")
        )
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        assert list(listed.configs) == []


async def test_a_webhook_given_with_the_message_is_told_of_its_task(
    services: Settings, receiver: Receiver
) -> None:
    hook, session = f"{receiver.url}/inline", "a2a-push-inline"
    request = SendMessageRequest(
        message=message("write it", context=session),
        configuration=SendMessageConfiguration(
            task_push_notification_config=TaskPushNotificationConfig(url=hook, token="tok-i")
        ),
    )
    async with http_app(services) as url, a2a(url) as client:
        await send(client, message("first", context=session))
        [reply] = [r async for r in client.send_message(request)]
        assert reply.task.status.state == S.TASK_STATE_INPUT_REQUIRED  # set before it asked
        await send(client, message("approve", context=session, task=reply.task.id))
        await until(lambda: "TASK_STATE_COMPLETED" in states_of(receiver, "/inline"))
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=reply.task.id)
        )
    assert [c.url for c in listed.configs] == [hook]
    assert states_of(receiver, "/inline")[-2:] == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
    assert all(u["taskId"] == reply.task.id for u in receiver.updates("/inline"))


def states_of(receiver: Receiver, path: str) -> list[str]:
    return [u["status"]["state"] for u in receiver.updates(path)]


async def test_a_private_webhook_is_refused_unless_allowed(services: Settings) -> None:
    strict = services.model_copy(update={"a2a_push_allow_private": False})
    async with http_app(strict) as url, a2a(url) as client:
        task = await send(client, message("hi", context="a2a-push-ssrf"))
        for hook in ("http://127.0.0.1:9/x", "http://10.0.0.1/x", "http://169.254.169.254/"):
            with pytest.raises(ERRORS, match="TURNSTREAM_A2A_PUSH_ALLOW_PRIVATE"):
                await client.create_task_push_notification_config(config(task.id, hook))


async def test_a_name_is_not_judged_at_creation_but_at_connect(services: Settings) -> None:
    """A name that does not resolve now (or resolves to a private address now) proves
    nothing about delivery time: the config is taken, and the delivery's transport judges
    the address it connects to (tests/unit/test_egress.py)."""
    strict = services.model_copy(update={"a2a_push_allow_private": False})
    async with http_app(strict) as url, a2a(url) as client:
        task = await send(client, message("hi", context="a2a-push-names"))
        for hook in ("https://hooks.example.invalid/x", "http://localhost:9/x"):
            made = await client.create_task_push_notification_config(config(task.id, hook))
            assert made.url == hook


async def test_each_update_is_posted_once_across_a_restart(
    services: Settings, receiver: Receiver, bus: Bus
) -> None:
    session = "a2a-push-restart"
    async with http_app(services) as url, a2a(url) as client:
        await send(client, message("first", context=session))
        waiting = await send(client, message("write it", context=session))
        assert waiting.status.state == S.TASK_STATE_INPUT_REQUIRED
        await client.create_task_push_notification_config(
            config(waiting.id, f"{receiver.url}/restart", token="tok-r", config_id="r1")
        )
    # the HTTP face is down: the prompt is answered (over NATS) and the turn ends
    interaction = waiting.status.message.parts[1].data.struct_value["interaction"]
    answer = {
        "type": "answer",
        "sessionId": session,
        "chatId": session,
        "sender": {"kind": "human", "id": "test"},
        "idempotencyKey": "push-restart-answer",
        "interactionId": interaction["interactionId"],
        "decision": "approve",
    }
    await bus.js.publish(
        bus.subjects.inbound(session),
        orjson.dumps(answer),
        headers={"Nats-Msg-Id": answer["idempotencyKey"]},
    )

    async def ended() -> bool:
        stored = await bus.store.read_session(session)
        return any(isinstance(s.event, TurnEnded) and s.event.turn_id == waiting.id for s in stored)

    for _ in range(200):
        if await ended():
            break
        await asyncio.sleep(0.05)
    assert receiver.updates("/restart") == []  # nobody delivers while the face is down
    async with http_app(services):  # the face again: it catches up from the log
        await until(lambda: len(receiver.updates("/restart")) >= 2)
    async with http_app(services):  # and once more: nothing is sent twice
        await asyncio.sleep(1.0)
    updates = receiver.updates("/restart")
    states = [u["status"]["state"] for u in updates]
    assert states == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"], updates
    ids = [u["metadata"]["updateId"] for u in updates]
    assert len(set(ids)) == 2 and all(i.startswith(f"{waiting.id}:") for i in ids)
    assert all(
        h["x-a2a-notification-token"] == "tok-r" for p, h, _ in receiver.posts if p == "/restart"
    )
    assert "done: wrote 2 bytes" in updates[-1]["status"]["message"]["parts"][0]["text"]


async def test_a_failing_webhook_is_retried_then_given_up_in_the_log(
    services: Settings, receiver: Receiver, bus: Bus
) -> None:
    session = "a2a-push-fail"
    async with http_app(services) as url, a2a(url) as client:
        await send(client, message("first", context=session))
        waiting = await send(client, message("write it", context=session))
        await client.create_task_push_notification_config(
            config(waiting.id, f"{receiver.url}/fail?secret=s3", config_id="f1")
        )
        await send(client, message("approve", context=session, task=waiting.id))

        async def abandoned() -> list[PushNotificationAbandoned]:
            stored = await bus.store.read_session(session)
            return [s.event for s in stored if isinstance(s.event, PushNotificationAbandoned)]

        for _ in range(200):
            if len(await abandoned()) >= 2:
                break
            await asyncio.sleep(0.05)
        given_up = await abandoned()
    assert [e.data.attempts for e in given_up] == [3, 3]  # working, then completed
    assert {e.data.error for e in given_up} == {"HTTP 500"}
    assert given_up[0].data.webhook == f"{receiver.url}/fail"  # its query (a secret) left out
    assert given_up[0].turn_id == waiting.id and given_up[0].data.config_id == "f1"
    assert len(receiver.updates("/fail")) == 6  # 3 tries of each


async def test_no_update_is_lost_or_sent_twice_across_a_restart_of_nats(
    services: Settings, receiver: Receiver, nats_server: EmbeddedServer
) -> None:
    """(Last in the module: the module's NATS server goes down and comes back.)"""
    session = "a2a-push-nats"
    async with http_app(services) as url:
        async with a2a(url) as client:
            await send(client, message("first", context=session))
            waiting = await send(client, message("write it", context=session))
            await client.create_task_push_notification_config(
                config(waiting.id, f"{receiver.url}/nats", config_id="n1")
            )
        nats_server.stop()
        await asyncio.sleep(0.5)
        nats_server.start()
        approve = message("approve", context=session, task=waiting.id)
        async with a2a(url) as client:  # the same face, reconnected
            for _ in range(20):
                try:  # the same message again until it is answered (one answer)
                    done = await send(client, approve)
                    break
                except ERRORS:  # the services are still reconnecting
                    await asyncio.sleep(0.2)
            assert done.status.state == S.TASK_STATE_COMPLETED, done
        await until(lambda: len(receiver.updates("/nats")) >= 2)
        await asyncio.sleep(0.5)
    states = [u["status"]["state"] for u in receiver.updates("/nats")]
    assert states == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
