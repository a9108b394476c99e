"""Least-privilege identities (issue 17 part 1) against a real nats-server loaded with
`ops/accounts.conf`: forged appends are refused, every service still runs a tool turn
under its own user, and wrong credentials say which user was refused."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import orjson
import pytest

from tests.http.conftest import http_app
from tests.integration.conftest import running_services
from tests.integration.test_tools_path import ROUND_TRIP, registry, script
from tests.security.conftest import SecureServer, apply_as_operator
from turnstream.bus import Bus, connect
from turnstream.bus.durables import a2a_push
from turnstream.client import message_command, send_and_wait
from turnstream.core.events import ToolInvocationSucceeded
from turnstream.core.subjects import Subjects
from turnstream.http.a2a.push_consumer import bind, skip_to
from turnstream.http.a2a.pusher import DURABLE
from turnstream.settings import Settings

SUBJECTS = Subjects("ts")


def settings(server: SecureServer, user: str, tmp: Path, **overrides: object) -> Settings:
    values: dict[str, object] = {"workspace": tmp / "workspace", "security_mode": "auto"}
    values.update(overrides)
    return Settings(nats_url=server.url(user), data_dir=tmp, **values)  # type: ignore[arg-type]


@asynccontextmanager
async def services_as_themselves(
    server: SecureServer, tmp: Path, **overrides: object
) -> AsyncIterator[None]:
    """The five services in-process, each on its own connection as its own user, after the
    operator's setup step."""
    await apply_as_operator(server)
    scripted = script(tmp, *ROUND_TRIP)
    async with running_services(
        lambda user: settings(server, user, tmp, script=scripted, **overrides),
        tools=registry(),
        with_audit=True,
        settle_s=0.6,
    ):
        yield


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "notes.txt").write_text("the secret word is turnip\n")
    return tmp_path


@pytest.fixture(scope="module")
async def streams(secure_server: SecureServer) -> None:
    """The streams and buckets, created by the setup step (as the operator)."""
    await apply_as_operator(secure_server)


async def as_user(server: SecureServer, user: str, password: str | None = None) -> Bus:
    return await connect(server.url(user, password), SUBJECTS, name=f"test-{user}")


async def test_each_service_runs_the_tool_turn_under_its_own_identity(
    secure_server: SecureServer, tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with services_as_themselves(secure_server, tmp):
        tenant = await as_user(secure_server, "client-acme")
        try:
            outcome = await send_and_wait(
                tenant, message_command("acme", "read my notes"), timeout=20
            )
        finally:
            await tenant.close()
    refused = [r.getMessage() for r in caplog.records if "violation" in r.getMessage().lower()]
    assert outcome.status == "completed", (outcome, refused)
    assert "turnip" in (outcome.reply or "")
    assert refused == []


async def test_a_result_over_the_budget_is_kept_without_the_right_to_purge(
    secure_server: SecureServer, tmp: Path
) -> None:
    """The object store replaces an object by purging its chunks, a right no service has:
    the executor keeps each full result under a name of its own, never replacing one."""
    (tmp / "workspace" / "notes.txt").write_text("the secret word is turnip\n" + "x" * 2000)
    async with services_as_themselves(secure_server, tmp, tool_result_budget=256):
        tenant = await as_user(secure_server, "client-acme")
        operator = await as_user(secure_server, "operator")
        try:
            outcome = await send_and_wait(
                tenant, message_command("acme", "read my notes"), timeout=20
            )
            events = [s.event for s in await operator.store.read_session("acme")]
            [result] = [  # this turn's: the module's server has run other turns of acme
                e
                for e in events
                if isinstance(e, ToolInvocationSucceeded) and e.turn_id == outcome.turn_id
            ]
            assert result.data.truncated and result.data.blob, result.data
            name = base64.urlsafe_b64encode(result.data.blob.encode()).decode()
            meta = await operator.js.get_last_msg(
                f"OBJ_{SUBJECTS.blobs_bucket}", f"$O.{SUBJECTS.blobs_bucket}.M.{name}"
            )
        finally:
            for bus in (operator, tenant):
                await bus.close()
    assert outcome.status == "completed", outcome
    assert orjson.loads(meta.data)["size"] == result.data.size


@pytest.mark.parametrize(
    ("user", "event_type"),
    [
        ("client", "ToolCallApproved"),
        ("client-acme", "ToolCallApproved"),
        ("client", "TurnEnded"),
        ("tool-executor", "ToolCallApproved"),
        # the runner judges calls that need no person (ToolCallApproved is its own now),
        # but never answers a prompt for a person nor opens one
        ("turn-runner", "InteractionAnswered"),
        ("turn-runner", "InteractionRequested"),
        ("gateway", "ToolCallApproved"),
        ("audit", "ToolCallApproved"),
        ("tool-executor", "TurnEnded"),
        ("approval", "TurnEnded"),
        ("approval", "ToolInvocationRequested"),
        ("approval", "ToolCallModeInvoked"),  # the mode's verdicts are the runner's
        ("client-acme", "TurnEnded"),
        ("http", "TurnEnded"),
        ("http", "InputAccepted"),
        ("http", "InteractionAnswered"),
    ],
)
async def test_a_forged_append_is_refused_by_the_server(
    secure_server: SecureServer, streams: None, user: str, event_type: str
) -> None:
    operator = await as_user(secure_server, "operator")
    errors: list[Exception] = []
    forger = await connect(secure_server.url(user), SUBJECTS, name=f"forger-{user}")
    forger.nc._error_cb = _collect(errors)  # nats-py reports -ERR here
    try:
        before = await operator.js.stream_info("TS_LOG")
        subject = SUBJECTS.log("acme", event_type)
        with pytest.raises(Exception):  # noqa: B017 - refused: no ack (timeout) or an error
            forged = b'{"type": "%s", "forged": true}' % event_type.encode()
            await forger.js.publish(subject, forged, timeout=1.0)
        await asyncio.sleep(0.2)
        after = await operator.js.stream_info("TS_LOG")
        assert after.state.last_seq == before.state.last_seq, "the forged event was stored"
        assert any("permissions violation" in str(e).lower() for e in errors), errors
        assert any(subject.lower() in str(e).lower() for e in errors), errors
    finally:
        await forger.close()
        await operator.close()


def _collect(errors: list[Exception]):  # type: ignore[no-untyped-def]
    async def on_error(exc: Exception) -> None:
        errors.append(exc)

    return on_error


async def test_the_http_face_runs_under_its_own_identity(
    secure_server: SecureServer, tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """REST (wait, events, sessions, SSE) and A2A (its KV task store) as the `http` user:
    everything the face does is allowed, and nothing is refused on the way."""
    async with services_as_themselves(secure_server, tmp):
        web = settings(secure_server, "http", tmp)
        async with http_app(web) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
            ready = await http.get("/readyz")
            assert ready.status_code == 200, ready.text
            r = await http.post("/v1/sessions/web-1/messages?wait=true", json={"text": "notes"})
            assert r.status_code == 200 and r.json()["data"]["status"] == "completed", r.text
            assert "turnip" in r.json()["data"]["reply"]
            events = (await http.get("/v1/sessions/web-1/events?limit=500")).json()["items"]
            assert events[-1]["event"]["type"] in ("TurnEnded", "SessionTurnEnd")
            async with http.stream("GET", "/v1/sessions/web-1/stream?tokens=false") as stream:
                lines = stream.aiter_lines()
                assert (await anext(lines)).startswith("retry: ")
                assert await anext(lines) == ""
                first = await anext(lines)
                assert first.startswith(("id:", "event:")), first
            await asyncio.sleep(0.5)  # the audit projection
            assert (await http.get("/v1/sessions")).status_code == 200
            rpc = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {
                    "message": {
                        "messageId": "m-secure-1",
                        "contextId": "web-a2a",
                        "role": "ROLE_USER",
                        "parts": [{"text": "notes"}],
                    }
                },
            }
            r = await http.post("/a2a", json=rpc, headers={"A2A-Version": "1.0"})
            task = r.json()["result"]["task"]
            assert task["status"]["state"] == "TASK_STATE_COMPLETED", r.text
            rpc = {"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task["id"]}}
            r = await http.post("/a2a", json=rpc, headers={"A2A-Version": "1.0"})
            assert r.json()["result"]["status"]["state"] == "TASK_STATE_COMPLETED", r.text
            rpc = {"jsonrpc": "2.0", "id": 3, "method": "ListTasks", "params": {}}
            r = await http.post("/a2a", json=rpc, headers={"A2A-Version": "1.0"})
            assert [t["id"] for t in r.json()["result"]["tasks"]] == [task["id"]], r.text
    refused = [r.getMessage() for r in caplog.records if "violation" in r.getMessage().lower()]
    assert refused == []


async def test_the_http_face_may_move_its_push_consumer_forward(
    secure_server: SecureServer, streams: None
) -> None:
    """What the A2A push delivery does when a config comes after a time without any:
    bind its durable and reset it past the events no config needs, as the `http` user."""
    bus = await as_user(secure_server, "http")
    try:
        stream = SUBJECTS.log_stream
        sub = await bind(bus, a2a_push(10.0), stream)  # made by the setup step
        last = (await bus.js.stream_info(stream)).state.last_seq
        assert await skip_to(bus, stream, DURABLE, last + 10)
        assert (await bus.js.consumer_info(stream, DURABLE)).delivered.stream_seq == last + 9
        await sub.unsubscribe()
    finally:
        await bus.close()


async def test_wrong_credentials_name_the_user(secure_server: SecureServer) -> None:
    with pytest.raises(ConnectionError) as refused:
        await connect(
            secure_server.url("approval", "not-the-password"),
            SUBJECTS,
            connect_timeout=2,
        )
    message = str(refused.value)
    assert "approval" in message and "authoriz" in message.lower(), message
    assert "not-the-password" not in message
