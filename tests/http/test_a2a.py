"""The A2A edge with the SDK's own client, against the real app over a real socket, the
services and a real nats-server: card, SendMessage, SendStreamingMessage, GetTask,
CancelTask, SubscribeToTask, prompts as input-required, two replicas on one task, keys."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
import uuid_utils
import yaml
from a2a.client import A2AClientError, ClientConfig, create_client
from a2a.client.client import Client
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import A2AError

from tests.http.conftest import REPO, http_app
from turnstream.bus import Bus
from turnstream.core.events import InputAccepted, InteractionAnswered, TurnEnded
from turnstream.http.a2a.store import bucket_name
from turnstream.http.auth import hash_key
from turnstream.settings import Settings

pytestmark = pytest.mark.integration
S = TaskState
ERRORS = (A2AClientError, A2AError)


@pytest.fixture(scope="module")
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"agents": REPO / "agents"})


@pytest.fixture(scope="module")
async def url(services: Settings) -> AsyncIterator[str]:
    async with http_app(services) as url:
        yield url


@pytest.fixture(scope="module")
async def replica(services: Settings) -> AsyncIterator[str]:
    """A second HTTP app (its own NATS connection and hub), as a second replica would be."""
    async with http_app(services) as url:
        yield url


@contextlib.asynccontextmanager
async def a2a(
    url: str, *, streaming: bool = False, key: str | None = None, binding: str = "JSONRPC"
) -> AsyncIterator[Client]:
    """The SDK's client of `binding`, from the card at `url` (over its own httpx client,
    closed after)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx.AsyncClient(timeout=30, headers=headers) as http:
        config = ClientConfig(
            streaming=streaming, httpx_client=http, supported_protocol_bindings=[binding]
        )
        client = await create_client(url, config)
        async with client:
            yield client


def message(text: str, context: str = "", task: str = "", data: Any = None) -> Message:
    parts = [Part(text=text)] if text else []
    if data is not None:
        parts.append(Part(data=_value(data)))
    return Message(
        message_id=str(uuid_utils.uuid7()),
        role=Role.ROLE_USER,
        parts=parts,
        context_id=context,
        task_id=task,
    )


def _value(data: dict[str, Any]) -> Any:
    from google.protobuf.struct_pb2 import Value

    value = Value()
    value.struct_value.update(data)
    return value


async def send(client: Client, msg: Message, *, immediately: bool = False) -> Task:
    request = SendMessageRequest(
        message=msg, configuration=SendMessageConfiguration(return_immediately=immediately)
    )
    responses = [r async for r in client.send_message(request)]
    assert len(responses) == 1 and responses[0].HasField("task"), responses
    return responses[0].task


def text_of(task: Task) -> str:
    return "".join(p.text for p in task.status.message.parts)


async def test_agent_card_lists_the_profiles_as_skills(url: str) -> None:
    async with httpx.AsyncClient(base_url=url, headers={"A2A-Version": "1.0"}) as http:
        card = (await http.get("/.well-known/agent-card.json")).json()
    skills = {s["id"] for s in card["skills"]}
    assert {"default", "coordinator", "researcher"} <= skills
    interfaces = {
        (i["protocolVersion"], i["protocolBinding"], i["url"]) for i in card["supportedInterfaces"]
    }
    assert interfaces == {
        (version, binding, f"{url}{path}")
        for version in ("1.0", "0.3")
        for binding, path in (("JSONRPC", "/a2a"), ("HTTP+JSON", "/a2a/rest"))
    }
    assert card["capabilities"]["streaming"] is True
    assert "securitySchemes" not in card  # no keys file: loopback, no auth


async def test_send_message_is_a_turn_in_the_context_session(url: str, bus: Bus) -> None:
    async with a2a(url) as client:
        task = await send(client, message("hi", context="a2a-ctx-1"))
    assert task.status.state == S.TASK_STATE_COMPLETED, task
    assert task.context_id == "a2a-ctx-1"
    assert text_of(task) == "echo: hi"
    assert [p.text for a in task.artifacts for p in a.parts] == ["echo: hi"]
    stored = await bus.store.read_session("a2a-ctx-1")
    accepted = next(s.event for s in stored if isinstance(s.event, InputAccepted))
    assert accepted.turn_id == task.id  # taskId ↔ turn
    assert accepted.data.sender.id == "a2a:loopback"
    assert [s.event.turn_id for s in stored if isinstance(s.event, TurnEnded)] == [task.id]


async def test_a_context_less_message_gets_a_new_session(url: str) -> None:
    async with a2a(url) as client:
        task = await send(client, message("fresh"))
    assert task.context_id.startswith("a2a-") and task.status.state == S.TASK_STATE_COMPLETED


async def test_the_same_message_id_twice_is_one_task(url: str, bus: Bus) -> None:
    msg = message("once", context="a2a-idem")
    async with a2a(url) as client:
        first = await send(client, msg)
        second = await send(client, msg)
    assert first.id == second.id and second.status.state == S.TASK_STATE_COMPLETED
    stored = await bus.store.read_session("a2a-idem")
    assert sum(isinstance(s.event, InputAccepted) for s in stored) == 1


async def test_a_prompt_is_input_required_and_a_reply_answers_it(url: str, bus: Bus) -> None:
    async with a2a(url) as client:
        await send(client, message("first", context="a2a-ask"))
        waiting = await send(client, message("write it", context="a2a-ask"))
        assert waiting.status.state == S.TASK_STATE_INPUT_REQUIRED, waiting
        assert "write_file" in text_of(waiting)
        done = await send(client, message("approve", context="a2a-ask", task=waiting.id))
    assert done.id == waiting.id
    assert done.status.state == S.TASK_STATE_COMPLETED, done
    assert "done: wrote 2 bytes" in text_of(done)
    stored = await bus.store.read_session("a2a-ask")
    answers = [s.event for s in stored if isinstance(s.event, InteractionAnswered)]
    assert [a.data.decision for a in answers] == ["approve"]


async def test_a_data_part_can_deny_the_prompt(url: str) -> None:
    async with a2a(url) as client:
        await send(client, message("first", context="a2a-deny"))
        waiting = await send(client, message("write it", context="a2a-deny"))
        assert waiting.status.state == S.TASK_STATE_INPUT_REQUIRED
        reply = message("", context="a2a-deny", task=waiting.id, data={"decision": "deny"})
        done = await send(client, reply)
    # denied tool call: the model goes on without it, the turn still ends
    assert done.status.state in (S.TASK_STATE_COMPLETED, S.TASK_STATE_FAILED), done


async def test_streaming_message_yields_the_task_tokens_and_updates(url: str) -> None:
    async with a2a(url, streaming=True) as client:
        request = SendMessageRequest(message=message("streamed words", context="a2a-stream"))
        events: list[StreamResponse] = [r async for r in client.send_message(request)]
    assert events[0].HasField("task")
    states = [e.status_update.status.state for e in events if e.HasField("status_update")]
    assert states[-1] == S.TASK_STATE_COMPLETED, events
    artifacts = [e.artifact_update for e in events if e.HasField("artifact_update")]
    live = "".join(p.text for a in artifacts if a.artifact.name == "live" for p in a.artifact.parts)
    assert live == "echo: streamed words"  # the model's tokens, as they came
    [reply] = [a for a in artifacts if a.artifact.name == "reply"]
    assert reply.last_chunk and reply.artifact.parts[0].text == "echo: streamed words"


async def test_two_replicas_answer_for_the_same_task(url: str, replica: str, bus: Bus) -> None:
    async with a2a(url) as a, a2a(url, streaming=True) as watcher, a2a(replica) as b:
        await send(a, message("first", context="a2a-two"))
        started = await send(a, message("write it", context="a2a-two"), immediately=True)
        # replica B never saw this task: it reads it from KV and the log
        for _ in range(100):
            seen = await b.get_task(GetTaskRequest(id=started.id))
            if seen.status.state == S.TASK_STATE_INPUT_REQUIRED:
                break
            await asyncio.sleep(0.05)
        assert seen.status.state == S.TASK_STATE_INPUT_REQUIRED and seen.context_id == "a2a-two"
        # subscribed on A, answered on B: A's stream follows the task to its end
        stream = watcher.subscribe(SubscribeToTaskRequest(id=started.id))
        first = await anext(stream)
        assert first.task.status.state == S.TASK_STATE_INPUT_REQUIRED
        done = await send(b, message("yes", context="a2a-two", task=started.id))
        assert done.status.state == S.TASK_STATE_COMPLETED
        updates = [
            u.status_update.status.state async for u in stream if u.HasField("status_update")
        ]
        assert updates[-1] == S.TASK_STATE_COMPLETED, updates
        ended = (await a.get_task(GetTaskRequest(id=started.id))).status.state
        assert ended == S.TASK_STATE_COMPLETED
    kv = await bus.js.key_value(bucket_name(bus))
    assert (await kv.get(started.id)).value  # the task lives in JetStream KV


async def test_subscribe_follows_a_task_answered_over_rest(url: str, replica: str) -> None:
    async with a2a(url, streaming=True) as a, a2a(replica) as b:
        await send(b, message("first", context="a2a-sub"))
        waiting = await send(b, message("write it", context="a2a-sub"))
        assert waiting.status.state == S.TASK_STATE_INPUT_REQUIRED
        stream = a.subscribe(SubscribeToTaskRequest(id=waiting.id))
        assert (await anext(stream)).task.id == waiting.id
        interaction = waiting.status.message.parts[1].data.struct_value["interaction"]
        async with httpx.AsyncClient(base_url=replica) as http:
            r = await http.post(
                f"/v1/sessions/a2a-sub/answers/{interaction['interactionId']}",
                json={"decision": "approve"},
            )
            assert r.status_code == 202, r.text
        updates = [
            u.status_update.status.state async for u in stream if u.HasField("status_update")
        ]
        assert updates == [S.TASK_STATE_WORKING, S.TASK_STATE_COMPLETED]
        with pytest.raises(ERRORS, match="nothing to subscribe to"):
            await anext(a.subscribe(SubscribeToTaskRequest(id=waiting.id)))


async def test_cancel_task_is_a_hard_interrupt(url: str, bus: Bus) -> None:
    async with a2a(url) as client:
        await send(client, message("first", context="a2a-cancel"))
        waiting = await send(client, message("write it", context="a2a-cancel"))
        assert waiting.status.state == S.TASK_STATE_INPUT_REQUIRED
        canceled = await client.cancel_task(CancelTaskRequest(id=waiting.id))
        assert canceled.status.state == S.TASK_STATE_CANCELED, canceled
        with pytest.raises(ERRORS, match=r"canceled already"):
            await client.cancel_task(CancelTaskRequest(id=waiting.id))
    stored = await bus.store.read_session("a2a-cancel")
    ended = [s.event for s in stored if isinstance(s.event, TurnEnded)]
    assert ended[-1].turn_id == waiting.id and ended[-1].data.failure_class == "interrupted"


async def test_list_tasks_of_a_context_newest_first(url: str, replica: str) -> None:
    async with a2a(url) as a, a2a(replica) as b:
        first = await send(a, message("one", context="a2a-list"))
        second = await send(a, message("two", context="a2a-list"))
        listed = await b.list_tasks(ListTasksRequest(context_id="a2a-list"))
        assert [t.id for t in listed.tasks] == [second.id, first.id]
        assert listed.total_size == 2 and not listed.next_page_token
        page = await b.list_tasks(ListTasksRequest(context_id="a2a-list", page_size=1))
        assert [t.id for t in page.tasks] == [second.id] and page.next_page_token == second.id
        rest = await b.list_tasks(
            ListTasksRequest(context_id="a2a-list", page_size=1, page_token=page.next_page_token)
        )
        assert [t.id for t in rest.tasks] == [first.id]
        asking = await b.list_tasks(
            ListTasksRequest(context_id="a2a-list", status=S.TASK_STATE_INPUT_REQUIRED)
        )
        assert [t.id for t in asking.tasks] == [second.id]  # the 2nd turn asks to write


async def test_unknown_task_and_bad_context(url: str) -> None:
    async with a2a(url) as client:
        with pytest.raises(ERRORS, match="no task"):
            await client.get_task(GetTaskRequest(id="no-such-task"))
        with pytest.raises(ERRORS, match="contextId"):
            await send(client, message("hi", context="bad context!"))


def v03_request(method: str, context: str, text: str) -> dict[str, Any]:
    """A JSON-RPC request of an A2A v0.3 client: `method` with one text message."""
    message = {
        "kind": "message",
        "role": "user",
        "messageId": str(uuid_utils.uuid7()),
        "contextId": context,
        "parts": [{"kind": "text", "text": text}],
    }
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"message": message}}


async def test_version_not_supported_names_the_a2a_version_header(url: str) -> None:
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {"messageId": "v", "role": "ROLE_USER", "parts": [{"text": "x"}]}},
    }
    async with httpx.AsyncClient(base_url=url) as http:
        none = (await http.post("/a2a", json=call)).json()["error"]
        wrong = (await http.post("/a2a", json=call, headers={"A2A-Version": "2.0"})).json()
    assert none["code"] == -32009, none
    assert "no A2A-Version header (read as 0.3)" in none["message"], none
    assert "`A2A-Version: 1.0`" in none["message"], none
    assert "A2A-Version: 2.0" in wrong["error"]["message"], wrong


async def test_a_v0_3_client_is_answered_on_the_same_url(url: str) -> None:
    body = v03_request("message/send", "a2a-v03", "old")
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        r = await http.post("/a2a", json=body)
        result = r.json()["result"]
        assert result["kind"] == "task" and result["status"]["state"] == "completed", result
        assert result["contextId"] == "a2a-v03"
        get = {"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": result["id"]}}
        again = (await http.post("/a2a", json=get)).json()["result"]
    assert again["id"] == result["id"] and again["status"]["state"] == "completed", again


@pytest.fixture(scope="module")
async def keyed(services: Settings, tmp_path_factory: pytest.TempPathFactory) -> Any:
    path = tmp_path_factory.mktemp("a2a-keys") / "keys.yaml"
    keys = [
        {"name": "agent", "key": hash_key("sk-agent-1"), "scopes": ["send", "read"],
         "sessions": "partner-*"},
        {"name": "reader", "key": hash_key("sk-reader-1"), "scopes": ["read"]},
    ]  # fmt: skip
    path.write_text(yaml.safe_dump({"keys": keys}))
    async with http_app(services.model_copy(update={"http_keys_file": path})) as url:
        yield url


class TestKeys:
    """The same keys as the REST routes: 401 before any JSON-RPC, scopes per method."""

    async def test_no_key_is_401_and_the_card_says_bearer(self, keyed: str) -> None:
        async with httpx.AsyncClient(base_url=keyed) as http:
            headers = {"A2A-Version": "1.0"}
            card = (await http.get("/.well-known/agent-card.json", headers=headers)).json()
            r = await http.post("/a2a", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask"})
        assert r.status_code == 401
        assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"

    async def test_scopes_and_session_globs_apply(self, keyed: str) -> None:
        async with a2a(keyed, key="sk-agent-1") as agent, a2a(keyed, key="sk-reader-1") as reader:
            task = await send(agent, message("hello", context="partner-1"))
            assert task.status.state == S.TASK_STATE_COMPLETED
            with pytest.raises(ERRORS, match="forbidden"):
                await send(agent, message("hello", context="other-1"))
            with pytest.raises(ERRORS, match="forbidden"):
                await send(reader, message("hello", context="partner-2"))
            seen = await reader.get_task(GetTaskRequest(id=task.id))
            assert seen.status.state == S.TASK_STATE_COMPLETED


async def test_two_replicas_writing_one_task_merge(services: Settings, bus: Bus) -> None:
    """Replicas write a task's entry with compare-and-set; a writer that lost the race
    keeps the view folded furthest and the union of the client's messages."""
    from turnstream.http.a2a.store import TaskRecord, TaskStore
    from turnstream.http.a2a.view import TurnView

    one, other = TaskStore(bus), TaskStore(bus)
    await one.put(TaskRecord(TurnView("merge-t1", "s", last_seq=5), [{"messageId": "m1"}]))
    a, b = await one.get("merge-t1"), await other.get("merge-t1")
    assert a is not None and b is not None
    a.view.last_seq, a.view.state = 9, "completed"
    await one.put(a)
    b.messages.append({"messageId": "m2"})
    await other.put(b)  # stale revision: merged, not lost
    merged = await one.get("merge-t1")
    assert merged is not None
    assert (merged.view.last_seq, merged.view.state) == (9, "completed")
    assert [m["messageId"] for m in merged.messages] == ["m1", "m2"]


async def test_a_v0_3_client_streams_too(url: str) -> None:
    body = v03_request("message/stream", "a2a-v03-stream", "old stream")
    results = []
    async with (
        httpx.AsyncClient(base_url=url, timeout=30) as http,
        http.stream("POST", "/a2a", json=body) as response,
    ):
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                results.append(orjson.loads(line[5:])["result"])
    assert results[0]["kind"] == "task"
    finals = [r for r in results if r.get("kind") == "status-update"]
    assert finals[-1]["status"]["state"] == "completed" and finals[-1]["final"] is True
