"""What an outside A2A client runs into beyond the happy path, with the SDK's client
against the real app, services and nats-server: a retried message answered with its first
task wherever it ran, a verdict that never comes said as what happened, parts the agent
does not take refused with the spec's error."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from a2a.types.a2a_pb2 import Message, Part, Role, TaskState

from tests.http.conftest import FAST, http_app
from tests.http.test_a2a import ERRORS, a2a, message, send
from turnstream.bus import Bus, connect
from turnstream.bus.streams import StreamLimits
from turnstream.core.events import InputAccepted, InteractionAnswered
from turnstream.core.subjects import Subjects
from turnstream.http.context import Options
from turnstream.settings import Settings

pytestmark = pytest.mark.integration
S = TaskState


async def test_a_retry_without_its_context_is_the_first_task(url: str, bus: Bus) -> None:
    msg = message("once only", context="a2a-retry")
    async with a2a(url) as client:
        first = await send(client, msg)
        again = Message()
        again.CopyFrom(msg)
        again.ClearField("context_id")  # the client lost the contextId the answer gave
        second = await send(client, again)
    assert first.status.state == S.TASK_STATE_COMPLETED, first
    assert (second.id, second.context_id) == (first.id, "a2a-retry")
    assert second.status.state == S.TASK_STATE_COMPLETED
    stored = await bus.store.read_session("a2a-retry")
    assert sum(isinstance(s.event, InputAccepted) for s in stored) == 1


async def test_a_retry_in_another_context_is_the_first_task(url: str, bus: Bus) -> None:
    msg = message("first here", context="a2a-retry-a")
    async with a2a(url) as client:
        first = await send(client, msg, immediately=True)  # still running: retried at once
        moved = Message()
        moved.CopyFrom(msg)
        moved.context_id = "a2a-retry-b"
        second = await send(client, moved)
    assert (second.id, second.context_id) == (first.id, "a2a-retry-a")
    assert second.status.state == S.TASK_STATE_COMPLETED, second
    assert await bus.store.read_session("a2a-retry-b") == []


async def test_a_retried_reply_to_a_task_that_ended_is_the_task(url: str, bus: Bus) -> None:
    async with a2a(url) as client:
        await send(client, message("first", context="a2a-retry-reply"))
        waiting = await send(client, message("write it", context="a2a-retry-reply"))
        approve = message("approve", context="a2a-retry-reply", task=waiting.id)
        done = await send(client, approve)
        again = await send(client, approve)  # its answer was lost: the client sends it again
        with pytest.raises(ERRORS, match="is completed"):  # a new reply to it is late
            await send(client, message("approve", context="a2a-retry-reply", task=waiting.id))
    assert done.status.state == again.status.state == S.TASK_STATE_COMPLETED
    assert again.id == waiting.id
    stored = await bus.store.read_session("a2a-retry-reply")
    assert sum(isinstance(s.event, InteractionAnswered) for s in stored) == 1


@pytest.fixture
async def no_gateway(settings: Settings) -> AsyncIterator[str]:
    """An app over streams nobody serves (their own prefix): a command is stored, and no
    gateway ever records a verdict on it."""
    alone = settings.model_copy(update={"prefix": "tsalone"})
    lone = await connect(settings.resolved_nats_url(), Subjects("tsalone"), ensure=StreamLimits())
    try:
        async with http_app(alone, Options(**{**vars(FAST), "accept_timeout_s": 0.5})) as url:
            yield url
    finally:
        await lone.close()


async def test_no_verdict_is_an_error_that_says_so(no_gateway: str) -> None:
    async with a2a(no_gateway) as client:
        with pytest.raises(ERRORS, match="no gateway recorded a verdict") as raised:
            await send(client, message("anyone?", context="a2a-alone"))
    assert type(raised.value).__name__ == "InternalError"  # not UnsupportedOperation


def parts_message(*parts: Part) -> Message:
    return Message(message_id="m-" + str(id(parts)), role=Role.ROLE_USER, parts=list(parts))


@pytest.mark.parametrize(
    "part",
    [
        Part(raw=b"MZ", media_type="application/x-msdownload"),
        Part(url="https://example.com/a.exe", media_type="application/x-msdownload"),
        Part(raw=b"\0\1", filename="a.bin"),
        Part(text="# hi", media_type="video/mp4"),
    ],
    ids=["exe", "exe-url", "untyped-file", "text-as-video"],
)
async def test_a_part_outside_the_input_modes_is_content_type_not_supported(
    url: str, part: Part
) -> None:
    async with a2a(url) as client:
        with pytest.raises(ERRORS, match=r"not supported|is not taken") as raised:
            await send(client, parts_message(part))
    assert type(raised.value).__name__ == "ContentTypeNotSupportedError"


async def test_the_rpc_url_with_a_trailing_slash_is_served(url: str) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "nope"}}
    async with httpx.AsyncClient(base_url=url, headers={"A2A-Version": "1.0"}) as http:
        r = await http.post("/a2a/", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["error"]["code"] == -32001  # TaskNotFound: answered, not redirected
