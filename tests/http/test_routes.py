"""Every REST route of DESIGN §12 against the real app, services and nats-server."""

from __future__ import annotations

import asyncio
import time

import httpx
import orjson
import pytest

from turnstream.bus import Bus
from turnstream.core.events import InputAccepted, TurnEnded

pytestmark = pytest.mark.integration
PROBLEM = "application/problem+json"


async def test_health_ready_and_docs(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    ready = await client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    assert (await client.get("/docs")).status_code == 200
    paths = (await client.get("/openapi.json")).json()["paths"]
    for path in (
        "/v1/sessions/{id}/messages",
        "/v1/sessions/{id}/steer",
        "/v1/sessions/{id}/interrupt",
        "/v1/sessions/{id}/answers/{interactionId}",
        "/v1/sessions/{id}/workflow",
        "/v1/sessions",
        "/v1/sessions/{id}",
        "/v1/sessions/{id}/events",
        "/v1/sessions/{id}/stream",
        "/v1/approvals",
        "/v1/workflows",
        "/v1/agents",
        "/v1/tickets",
    ):
        assert path in paths


async def test_message_is_accepted_with_its_turn_and_log_sequence(
    client: httpx.AsyncClient, bus: Bus
) -> None:
    r = await client.post("/v1/sessions/acc-1/messages", json={"text": "hello"})
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["event"] == "InputAccepted" and body["turnId"] and not body["duplicate"]
    stored = await bus.store.read_session("acc-1")
    first = next(s for s in stored if isinstance(s.event, InputAccepted))
    assert (first.seq, first.event.turn_id) == (body["seq"], body["turnId"])
    assert first.event.data.sender.id == "http:loopback"
    assert first.event.correlation_id == body["idempotencyKey"]


async def test_wait_answers_with_the_turn_ended_event(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/sessions/wait-1/messages?wait=true", json={"text": "hi"})
    assert r.status_code == 200, r.text
    ended = r.json()
    assert ended["type"] == "TurnEnded"
    assert ended["data"]["status"] == "completed"
    assert ended["data"]["reply"] == "echo: hi"


async def test_the_same_idempotency_key_twice_is_one_turn(
    client: httpx.AsyncClient, bus: Bus
) -> None:
    headers = {"Idempotency-Key": "idem-1"}
    first = await client.post(
        "/v1/sessions/idem/messages?wait=true", json={"text": "once"}, headers=headers
    )
    second = await client.post(
        "/v1/sessions/idem/messages?wait=true", json={"text": "once"}, headers=headers
    )
    accepted = await client.post(
        "/v1/sessions/idem/messages", json={"text": "once"}, headers=headers
    )
    assert first.status_code == second.status_code == 200
    assert first.json()["id"] == second.json()["id"]
    assert accepted.status_code == 202 and accepted.json()["duplicate"] is True
    events = [s.event for s in await bus.store.read_session("idem")]
    assert sum(isinstance(e, InputAccepted) for e in events) == 1
    assert sum(isinstance(e, TurnEnded) for e in events) == 1


@pytest.mark.parametrize(
    ("path", "content", "status", "slug"),
    [
        ("/v1/sessions/bad-1/messages", b"{not json", 400, "not_json"),
        ("/v1/sessions/bad-1/messages", b"[1, 2]", 422, "invalid_input"),
        (
            "/v1/sessions/bad-1/messages",
            b'{"sender": {"kind": "human", "id": "u"}}',
            422,
            "invalid_input",
        ),
        ("/v1/sessions/bad-1/messages", b'{"text": ""}', 422, "invalid_input"),
        ("/v1/sessions/bad-1/messages", b'{"text": "x", "colour": "red"}', 422, "invalid_input"),
        (
            "/v1/sessions/bad-1/messages",
            b'{"text": "x", "sessionId": "other"}',
            422,
            "invalid_input",
        ),
        ("/v1/sessions/bad*id/messages", b'{"text": "x"}', 422, "invalid_input"),
        ("/v1/sessions/bad.id/messages", b'{"text": "x"}', 422, "invalid_input"),
        ("/v1/sessions/bad-1/interrupt", b'{"mode": "gentle"}', 422, "invalid_input"),
        ("/v1/sessions/bad-1/messages", b'{"text": "' + b"x" * 9000 + b'"}', 413, "oversize"),
    ],
)
async def test_bad_input_is_a_problem(
    client: httpx.AsyncClient, bus: Bus, path: str, content: bytes, status: int, slug: str
) -> None:
    r = await client.post(path, content=content, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == PROBLEM
    problem = r.json()
    assert problem["type"] == f"urn:turnstream:problem:{slug}"
    assert problem["status"] == status and problem["detail"]
    assert problem["failureClass"] == "invalid_input"
    assert await bus.store.read_session("bad-1") == []  # nothing was published


async def test_bad_input_is_worded_for_the_sender(client: httpx.AsyncClient) -> None:
    s = "/v1/sessions/bad-2"
    r = await client.post(f"{s}/messages", content=b'{"text": "hi"}')  # no Content-Type
    assert r.status_code == 422 and "Content-Type: application/json" in r.json()["detail"]
    r = await client.post(f"{s}/messages", json={"txt": "hi"})
    assert r.status_code == 422 and "unknown field 'txt'" in r.json()["detail"], r.text
    r = await client.post(f"{s}/steer", json={"text": "go", "mode": "hard"})
    assert r.status_code == 422 and "unknown field 'mode'" in r.json()["detail"], r.text
    r = await client.post(f"{s}/messages", json={"text": "   "})
    assert r.status_code == 422 and "only spaces" in r.json()["detail"], r.text
    r = await client.post(f"{s}/messages", json={"text": "hi", "agent": "nobody"})
    assert "unknown field" not in r.text  # a field of the contract passes through


async def test_unknown_routes_and_methods_are_problems(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/nothing")
    assert r.status_code == 404 and r.headers["content-type"] == PROBLEM
    r = await client.delete("/v1/sessions/x/messages")
    assert r.status_code == 405 and r.headers["content-type"] == PROBLEM


async def test_a_rejection_by_the_gateway_is_422_with_it(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/sessions/wf-bad/workflow", json={"workflow": "no-such-flow"})
    assert r.status_code == 422, r.text
    problem = r.json()
    assert problem["rejection"] == "workflow_invalid"
    assert problem["failureClass"] == "invalid_input"
    assert problem["turnId"] and problem["seq"] > 0


async def test_steer_interrupt_and_workflow_are_accepted(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/sessions/cmds/steer", json={"text": "go on"})
    assert r.status_code == 202 and r.json()["event"] == "InputAccepted"
    r = await client.post("/v1/sessions/cmds/interrupt", json={"mode": "hard"})
    assert r.status_code == 202 and r.json()["event"] == "InterruptReceived"
    r = await client.post(
        "/v1/sessions/cmds-wf/workflow", json={"workflow": "review-and-implement"}
    )
    assert r.status_code == 202, r.text
    assert r.json()["event"] == "WorkflowAttached"


async def test_an_approval_round_trip(client: httpx.AsyncClient) -> None:
    s = "/v1/sessions/appr"
    assert (await client.post(f"{s}/messages?wait=true", json={"text": "one"})).status_code == 200
    # the 2nd turn asks to write a file: `wait` answers as soon as it waits on a person,
    # with what for and how to answer (not a 504 when its timeout has run out)
    started = time.monotonic()
    r = await client.post(f"{s}/messages?wait=true&timeout=15", json={"text": "two"})
    assert r.status_code == 202, r.text
    assert time.monotonic() - started < 10
    waiting = r.json()
    assert waiting["status"] == "waiting" and waiting["tool"] == "write_file"
    turn_id = waiting["turnId"]
    pending: list[dict] = []
    for _ in range(50):
        pending = (await client.get("/v1/approvals", params={"session": "appr"})).json()["items"]
        if pending:
            break
        await asyncio.sleep(0.1)
    assert [p["tool"] for p in pending] == ["write_file"]
    interaction = pending[0]["interactionId"]
    assert waiting["interactionId"] == interaction
    assert waiting["answer"]["path"] == f"{s}/answers/{interaction}"
    detail = (await client.get(f"{s}")).json()
    assert [p["interactionId"] for p in detail["pendingApprovals"]] == [interaction]
    assert (await client.post(f"{s}/answers/nope", json={"decision": "approve"})).status_code == 404
    r = await client.post(f"{s}/answers/{interaction}", json={"decision": "approve"})
    assert r.status_code == 202, r.text
    assert r.json()["event"] == "InteractionAnswered"
    again = await client.post(f"{s}/answers/{interaction}", json={"decision": "approve"})
    assert again.status_code == 202 and again.json()["duplicate"] is True
    other = await client.post(
        f"{s}/answers/{interaction}", json={"decision": "deny", "idempotencyKey": "late"}
    )
    assert other.status_code == 409
    for _ in range(100):
        page = (await client.get(f"{s}/events", params={"limit": 1000})).json()["items"]
        ends = [i["event"] for i in page if i["event"]["type"] == "TurnEnded"]
        if any(e["turnId"] == turn_id for e in ends):
            break
        await asyncio.sleep(0.1)
    ended = next(e for e in ends if e["turnId"] == turn_id)
    assert ended["data"]["status"] == "completed"
    assert ended["data"]["reply"].endswith("done: wrote 2 bytes to note.txt")


async def test_events_come_in_pages(client: httpx.AsyncClient) -> None:
    await client.post("/v1/sessions/pages/messages?wait=true", json={"text": "hi"})
    everything = (await client.get("/v1/sessions/pages/events?limit=1000")).json()
    assert everything["next"] is None
    seqs = [i["seq"] for i in everything["items"]]
    assert len(seqs) > 4 and seqs == sorted(seqs)
    page = (await client.get("/v1/sessions/pages/events?limit=2")).json()
    assert [i["seq"] for i in page["items"]] == seqs[:2] and page["next"] == seqs[1]
    rest = (await client.get(f"/v1/sessions/pages/events?after={page['next']}&limit=1000")).json()
    assert [i["seq"] for i in rest["items"]] == seqs[2:]


async def test_sessions_list_and_one_session(client: httpx.AsyncClient) -> None:
    await client.post("/v1/sessions/list-a/messages?wait=true", json={"text": "hi"})
    await client.post("/v1/sessions/list-b/messages?wait=true", json={"text": "hi"})
    items: list[dict] = []
    for _ in range(50):  # the audit service writes the projection a moment later
        items = (await client.get("/v1/sessions", params={"limit": 1000})).json()["items"]
        if {"list-a", "list-b"} <= {i["sessionId"] for i in items}:
            break
        await asyncio.sleep(0.1)
    ids = [i["sessionId"] for i in items]
    assert {"list-a", "list-b"} <= set(ids) and ids == sorted(ids)
    first = (await client.get("/v1/sessions", params={"limit": 1})).json()
    assert len(first["items"]) == 1 and first["next"] == first["items"][0]["sessionId"]
    second = (await client.get("/v1/sessions", params={"limit": 1, "after": first["next"]})).json()
    assert second["items"][0]["sessionId"] > first["next"]
    one = (await client.get("/v1/sessions/list-a")).json()
    assert one["sessionId"] == "list-a" and one["children"] == []
    assert [t["status"] for t in one["turns"]] == ["completed"]
    assert one["turns"][0]["reply"] == "echo: hi"
    assert orjson.loads(orjson.dumps(one["summary"]))["completed"] == 1
    missing = await client.get("/v1/sessions/never-seen")
    assert missing.status_code == 404 and missing.headers["content-type"] == PROBLEM


async def test_the_sessions_changed_last_come_first_filtered_with_the_total(
    client: httpx.AsyncClient,
) -> None:
    """What the console's sessions view asks (issue 42): a page of the sessions changed last,
    read back from the projection's end, with how many there are, filtered by status and
    time; not every session."""
    sessions = ["recent-1", "recent-2", "recent-3"]
    everything: dict = {}
    for session in sessions:  # each written in the projection before the next one starts
        await client.post(f"/v1/sessions/{session}/messages?wait=true", json={"text": "hi"})
        for _ in range(50):  # the audit service writes the projection a moment later
            everything = (await client.get("/v1/sessions?order=recent&limit=1000")).json()
            done = {i["sessionId"] for i in everything["items"] if i["status"] == "completed"}
            if session in done:
                break
            await asyncio.sleep(0.1)
    ids = [i["sessionId"] for i in everything["items"]]
    assert [s for s in ids if s in sessions] == sessions[::-1]  # the latest first
    assert everything["total"] == len(ids) and everything["next"] is None
    two = (await client.get("/v1/sessions", params={"order": "recent", "limit": 2})).json()
    assert [i["sessionId"] for i in two["items"]] == ids[:2] and two["total"] == len(ids)
    failed = (await client.get("/v1/sessions?order=recent&status=failed")).json()
    assert not set(sessions) & {i["sessionId"] for i in failed["items"]}
    assert all(i["status"] == "failed" for i in failed["items"])
    times = {i["sessionId"]: i["updatedAt"] for i in everything["items"]}
    since = times["recent-3"]
    newest = await client.get("/v1/sessions", params={"order": "recent", "since": since})
    found = {i["sessionId"]: i["updatedAt"] for i in newest.json()["items"]}
    assert "recent-3" in found and not {"recent-1", "recent-2"} & set(found)
    assert all(at >= since for at in found.values())
    by_id = await client.get("/v1/sessions", params={"limit": 1000, "status": "completed"})
    assert set(sessions) <= {i["sessionId"] for i in by_id.json()["items"]}
    assert by_id.json()["total"] == len(ids)


async def test_workflows_and_agents(client: httpx.AsyncClient) -> None:
    flows = (await client.get("/v1/workflows")).json()["items"]
    assert [(f["name"], f["valid"]) for f in flows] == [("review-and-implement", True)]
    agents = (await client.get("/v1/agents")).json()["items"]
    assert [(a["name"], a["valid"]) for a in agents] == [
        ("coordinator", True),
        ("researcher", True),
    ]
    assert agents[1]["tools"] == ["read_file", "list_dir"]


async def test_the_fast_paths_and_the_routes_answer_alike(client: httpx.AsyncClient) -> None:
    """`http/fast.py` serves ordinary POSTs and streams; an unusual request (a query
    parameter it does not take) goes to the FastAPI route: the same answers either way."""
    fast = await client.post("/v1/sessions/alike-1/messages?wait=true", json={"text": "a"})
    routed = await client.post(
        "/v1/sessions/alike-2/messages?wait=true&unused=1", json={"text": "a"}
    )
    assert fast.status_code == routed.status_code == 200
    assert fast.json()["data"] == routed.json()["data"]
    assert fast.headers["content-type"] == routed.headers["content-type"]
    for query in ("", "&unused=1"):
        r = await client.post(f"/v1/sessions/alike-1/messages?wait=maybe{query}", json={})
        assert r.status_code == 422 and r.headers["content-type"] == PROBLEM
        headers = {"Last-Event-ID": "x"}
        r = await client.get(f"/v1/sessions/alike-1/stream?tokens=false{query}", headers=headers)
        assert r.status_code == 422 and r.headers["content-type"] == PROBLEM, r.text
    for query in ("", "&unused=1"):
        async with client.stream(
            "GET",
            f"/v1/sessions/alike-1/stream?after=0{query}",
            headers={"Accept": "text/event-stream"},
        ) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            lines = stream.aiter_lines()
            assert (await anext(lines)).startswith("retry: ")
            assert await anext(lines) == ""
            assert (await anext(lines)).startswith("event: ")


async def test_before_the_services_created_the_log_the_face_says_503(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The face creates no stream (its NATS user may not): on a server where no service
    has run yet, a command or a stream is a 503 that says so, not a 500."""
    from tests.http.conftest import http_app
    from tests.integration.conftest import settings_for
    from turnstream.bus.embedded import EmbeddedServer

    tmp = tmp_path_factory.mktemp("bare")
    with EmbeddedServer(tmp / "nats") as server:
        async with (
            http_app(settings_for(server, tmp)) as url,
            httpx.AsyncClient(base_url=url, timeout=10) as bare,
        ):
            assert (await bare.get("/readyz")).status_code == 503
            for r in (
                await bare.post("/v1/sessions/s1/messages", json={"text": "hi"}),
                await bare.get("/v1/sessions/s1/stream"),
            ):
                assert r.status_code == 503 and r.headers["content-type"] == PROBLEM, r.text
                assert "does not exist yet" in r.json()["detail"]
