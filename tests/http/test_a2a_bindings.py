"""Both A2A bindings, JSON-RPC and HTTP+JSON, with the SDK's client of each against the
real app, services and nats-server: the same methods on the same task store, the same
keys, limits and problem answers."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    SendMessageRequest,
    TaskState,
)

from tests.http.test_a2a import ERRORS, a2a, keyed, message, send
from turnstream.bus import Bus
from turnstream.core.events import InputAccepted

__all__ = ["keyed"]  # the keyed app (a fixture)
pytestmark = pytest.mark.integration
S = TaskState


@pytest.fixture(params=["JSONRPC", "HTTP+JSON"])
def binding(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


def ctx(binding: str, name: str) -> str:
    return f"a2a-{'rest' if binding == 'HTTP+JSON' else 'rpc'}-{name}"


async def test_send_get_and_list(url: str, binding: str) -> None:
    context = ctx(binding, "send")
    async with a2a(url, binding=binding) as client:
        task = await send(client, message("hi", context=context))
        got = await client.get_task(GetTaskRequest(id=task.id))
        listed = await client.list_tasks(ListTasksRequest(context_id=context))
    assert task.status.state == S.TASK_STATE_COMPLETED, task
    assert got.status.message.parts[0].text == "echo: hi"
    assert [t.id for t in listed.tasks] == [task.id]


async def test_a_prompt_is_answered_and_a_task_cancelled(url: str, binding: str) -> None:
    context = ctx(binding, "ask")
    async with a2a(url, binding=binding) as client:
        await send(client, message("first", context=context))
        waiting = await send(client, message("write it", context=context))
        assert waiting.status.state == S.TASK_STATE_INPUT_REQUIRED, waiting
        done = await send(client, message("approve", context=context, task=waiting.id))
        assert done.status.state == S.TASK_STATE_COMPLETED, done
        other = ctx(binding, "cancel")
        await send(client, message("first", context=other))
        asking = await send(client, message("write it", context=other))
        assert asking.status.state == S.TASK_STATE_INPUT_REQUIRED, asking
        canceled = await client.cancel_task(CancelTaskRequest(id=asking.id))
    assert canceled.status.state == S.TASK_STATE_CANCELED, canceled


async def test_streaming(url: str, binding: str) -> None:
    request = SendMessageRequest(message=message("streamed", context=ctx(binding, "stream")))
    async with a2a(url, streaming=True, binding=binding) as client:
        events = [e async for e in client.send_message(request)]
    assert events[0].HasField("task")
    states = [e.status_update.status.state for e in events if e.HasField("status_update")]
    assert states[-1] == S.TASK_STATE_COMPLETED, events


async def test_a_retry_without_context_is_one_task(url: str, binding: str, bus: Bus) -> None:
    context = ctx(binding, "retry")
    msg = message("once", context=context)
    async with a2a(url, binding=binding) as client:
        first = await send(client, msg)
        again = Message()
        again.CopyFrom(msg)
        again.ClearField("context_id")
        second = await send(client, again)
    assert (second.id, second.context_id) == (first.id, context)
    stored = await bus.store.read_session(context)
    assert sum(isinstance(s.event, InputAccepted) for s in stored) == 1


async def test_a_file_of_a_type_not_taken_is_content_type_not_supported(
    url: str, binding: str
) -> None:
    image = message("", context=ctx(binding, "image"))
    image.parts.append(Part(raw=b"MZ", media_type="application/x-msdownload"))
    async with a2a(url, binding=binding) as client:
        with pytest.raises(ERRORS) as raised:
            await send(client, image)
    assert type(raised.value).__name__ == "ContentTypeNotSupportedError"


async def test_one_task_store_behind_both(url: str) -> None:
    async with a2a(url) as rpc, a2a(url, binding="HTTP+JSON") as rest:
        task = await send(rpc, message("made over json-rpc", context="a2a-both"))
        seen = await rest.get_task(GetTaskRequest(id=task.id))
    assert seen.id == task.id and seen.status.state == S.TASK_STATE_COMPLETED


async def test_a_v0_3_rest_client_is_answered(url: str) -> None:
    body = {
        "message": {
            "messageId": "v03-rest-1",
            "role": "ROLE_USER",
            "contextId": "a2a-v03-rest",
            "content": [{"text": "old rest"}],
        }
    }
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        r = await http.post("/a2a/rest/v1/message:send", json=body)
    assert r.status_code == 200, r.text
    task = r.json()["task"]
    assert task["contextId"] == "a2a-v03-rest" and task["status"]["state"] == "TASK_STATE_COMPLETED"


class TestRestKeysAndLimits:
    """The HTTP+JSON routes ask for the key first and answer the app's problems."""

    async def test_no_key_is_a_401_problem(self, keyed: Any) -> None:
        async with httpx.AsyncClient(base_url=keyed) as http:
            r = await http.get("/a2a/rest/tasks/some-task")
        assert r.status_code == 401
        assert r.headers["content-type"] == "application/problem+json"

    async def test_scopes_apply(self, keyed: Any) -> None:
        async with a2a(keyed, key="sk-reader-1", binding="HTTP+JSON") as reader:
            with pytest.raises(ERRORS, match="forbidden"):
                await send(reader, message("hello", context="partner-rest"))

    async def test_a_body_over_the_limit_is_a_413_problem(self, url: str) -> None:
        big = {
            "message": {"messageId": "big", "role": "ROLE_USER", "parts": [{"text": "x" * 9000}]}
        }
        async with httpx.AsyncClient(base_url=url, headers={"A2A-Version": "1.0"}) as http:
            r = await http.post("/a2a/rest/message:send", json=big)
        assert r.status_code == 413
        assert r.headers["content-type"] == "application/problem+json"
