"""The A2A edge as an outside A2A v1.0 client meets it, against `turnstream up` (the demo
agent, `ask` mode): both bindings, a retried message without its context, a part the agent
does not take, `POST /a2a/`, the card of each protocol version, a webhook told of a
task's updates."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
from a2a.types.a2a_pb2 import Message, Part, TaskPushNotificationConfig, TaskState

from tests.e2e.processes import running_up
from tests.http.test_a2a import ERRORS, a2a, message, send
from turnstream.bus.embedded import free_port

pytestmark = pytest.mark.e2e
S = TaskState


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    with running_up(
        tmp_path_factory.mktemp("a2a-up"),
        TURNSTREAM_HTTP_ADDR=f"127.0.0.1:{port}",
        TURNSTREAM_A2A_PUSH_ALLOW_PRIVATE="true",  # the test's webhook is on loopback
    ):
        base = f"http://127.0.0.1:{port}"
        for _ in range(200):  # the HTTP face starts after the services
            try:
                if httpx.get(f"{base}/readyz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        yield base


@pytest.fixture
async def webhook() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    posts: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        posts.append(orjson.loads(body))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False))
    task = asyncio.create_task(server.serve([sock]))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/hook", posts
    finally:
        server.should_exit = True
        await task


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_an_outside_client_over_each_binding(
    url: str, binding: str, webhook: tuple[str, list[dict[str, Any]]]
) -> None:
    hook, posts = webhook
    context = f"a2a-up-{binding[:4].lower()}"
    async with a2a(url, binding=binding) as client:
        first = message("hello", context=context)
        waiting = await send(client, first)  # the demo asks to run list_dir (`ask`)
        assert waiting.status.state == S.TASK_STATE_INPUT_REQUIRED, waiting
        retry = Message()
        retry.CopyFrom(first)
        retry.ClearField("context_id")
        again = await send(client, retry)
        assert (again.id, again.context_id) == (waiting.id, context)  # one turn, one task
        await client.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=waiting.id, url=hook, token="tok")
        )
        done = await send(client, message("approve", context=context, task=waiting.id))
        assert done.status.state == S.TASK_STATE_COMPLETED, done
        program = message("", context=context)  # images and PDFs are taken (attachments)
        program.parts.append(Part(raw=b"MZ", media_type="application/x-msdownload"))
        with pytest.raises(ERRORS) as refused:
            await send(client, program)
        assert type(refused.value).__name__ == "ContentTypeNotSupportedError"
    for _ in range(100):
        if len(posts) >= 2:
            break
        await asyncio.sleep(0.1)
    states = [p["statusUpdate"]["status"]["state"] for p in posts]
    assert states == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"], posts


async def test_the_card_and_the_rpc_url_with_a_slash(url: str) -> None:
    async with httpx.AsyncClient(base_url=url) as http:
        v10 = await http.get("/.well-known/agent-card.json", headers={"A2A-Version": "1.0"})
        v03 = await http.get("/.well-known/agent-card.json")
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "nope"}}
        slash = await http.post("/a2a/", json=rpc, headers={"A2A-Version": "1.0"})
    assert "url" not in v10.json() and v10.json()["capabilities"]["pushNotifications"]
    assert v03.json()["url"] == f"{url}/a2a" and "supportedInterfaces" not in v03.json()
    assert v10.headers["cache-control"] and v10.headers["etag"]
    assert slash.status_code == 200 and slash.json()["error"]["code"] == -32001
