"""API keys (DESIGN §12): the 401/403 matrix, session globs, tickets for EventSource, and
no key in a log line, an event or an error body."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.http.conftest import http_app
from tests.http.sse_client import read_sse
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.core.events import encode
from turnstream.http.auth import Authenticator, hash_key, load_keys
from turnstream.http.problems import Problem
from turnstream.settings import Settings

pytestmark = pytest.mark.integration

KEYS = {
    "admin": ("sk-admin-0123456789", ["admin"], "*"),
    "web-sender": ("sk-web-send-0123456789", ["send"], "web-*"),
    "web-reader": ("sk-web-read-0123456789", ["read"], "web-*"),
    "approver": ("sk-approve-0123456789", ["approve"], "*"),
}


def bearer(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[name][0]}"}


@pytest.fixture(scope="module")
def settings(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    path = tmp_path_factory.mktemp("keys") / "keys.yaml"
    entries = [
        {"name": name, "key": hash_key(key), "scopes": scopes, "sessions": glob}
        for name, (key, scopes, glob) in KEYS.items()
    ]
    path.write_text(yaml.safe_dump({"keys": entries}))
    return settings.model_copy(update={"http_keys_file": path})


@pytest.fixture(scope="module")
async def url(services: Settings) -> AsyncIterator[str]:
    async with http_app(services) as url:
        yield url


async def test_health_and_docs_need_no_key(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).status_code == 200
    assert (await client.get("/readyz")).status_code == 200
    assert (await client.get("/openapi.json")).status_code == 200


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer sk-nobody"}, {"Authorization": "Basic c2stYWRtaW4="}],
    ids=["none", "unknown", "not-bearer"],
)
async def test_no_or_a_wrong_key_is_401(client: httpx.AsyncClient, headers: dict) -> None:
    for method, path in [("GET", "/v1/sessions"), ("POST", "/v1/sessions/web-1/messages")]:
        r = await client.request(method, path, headers=headers, json={"text": "hi"})
        assert r.status_code == 401, (method, path, r.text)
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert r.json()["failureClass"] == "policy_denied"


MATRIX = [
    # (key, method, path, body, status)
    ("web-sender", "POST", "/v1/sessions/web-1/messages", {"text": "hi"}, 202),
    ("web-sender", "POST", "/v1/sessions/other-1/messages", {"text": "hi"}, 403),
    ("web-sender", "GET", "/v1/sessions/web-1/events", None, 403),
    ("web-sender", "POST", "/v1/sessions/web-1/answers/i-1", {"decision": "approve"}, 403),
    ("web-reader", "POST", "/v1/sessions/web-1/messages", {"text": "hi"}, 403),
    ("web-reader", "GET", "/v1/sessions/web-1/events", None, 200),
    ("web-reader", "GET", "/v1/sessions/other-1/events", None, 403),
    ("web-reader", "GET", "/v1/sessions/other-1/stream", None, 403),
    ("web-reader", "GET", "/v1/workflows", None, 200),
    ("web-reader", "POST", "/v1/sessions/web-1/interrupt", {"mode": "hard"}, 403),
    ("approver", "POST", "/v1/sessions/other-1/answers/i-1", {"decision": "approve"}, 404),
    ("approver", "GET", "/v1/sessions/other-1/events", None, 403),
    ("approver", "POST", "/v1/sessions/other-1/steer", {"text": "x"}, 403),
    ("admin", "POST", "/v1/sessions/other-1/messages", {"text": "hi"}, 202),
    ("admin", "GET", "/v1/sessions/other-1/events", None, 200),
    ("admin", "POST", "/v1/sessions/other-1/answers/i-1", {"decision": "deny"}, 404),
]


@pytest.mark.parametrize(("key", "method", "path", "body", "status"), MATRIX)
async def test_scopes_and_session_globs(
    client: httpx.AsyncClient, key: str, method: str, path: str, body: dict | None, status: int
) -> None:
    r = await client.request(method, path, headers=bearer(key), json=body)
    assert r.status_code == status, r.text
    if status == 403:
        assert r.json()["failureClass"] == "policy_denied"
        assert key in r.json()["detail"]  # the key's name, never its value


async def test_the_sessions_list_shows_only_the_keys_sessions(client: httpx.AsyncClient) -> None:
    for session in ("web-list", "other-list"):
        r = await client.post(
            f"/v1/sessions/{session}/messages?wait=true",
            json={"text": "hi"},
            headers=bearer("admin"),
        )
        assert r.status_code == 200
    everyone: set[str] = set()
    for _ in range(50):
        r = await client.get("/v1/sessions", headers=bearer("admin"))
        everyone = {i["sessionId"] for i in r.json()["items"]}
        if {"web-list", "other-list"} <= everyone:
            break
        await asyncio.sleep(0.1)
    assert {"web-list", "other-list"} <= everyone
    r = await client.get("/v1/sessions", headers=bearer("web-reader"))
    mine = {i["sessionId"] for i in r.json()["items"]}
    assert "web-list" in mine and all(s.startswith("web-") for s in mine)


async def test_a_ticket_opens_one_sessions_stream(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/tickets", json={"sessionId": "web-t"}, headers=bearer("web-reader"))
    assert r.status_code == 200, r.text
    ticket = r.json()["ticket"]
    async with client.stream("GET", f"/v1/sessions/web-t/stream?ticket={ticket}") as response:
        assert response.status_code == 200
        async for sse in read_sse(response):
            assert sse.comments == ["ping"]
            break
    other = await client.get(f"/v1/sessions/web-u/stream?ticket={ticket}")
    assert other.status_code == 403  # a ticket is for its one session
    events = await client.get(f"/v1/sessions/web-t/events?ticket={ticket}")
    assert events.status_code == 401  # and for the stream only
    forged = ticket[:-4] + ("AAAA" if not ticket.endswith("AAAA") else "BBBB")
    assert (await client.get(f"/v1/sessions/web-t/stream?ticket={forged}")).status_code == 401
    refused = await client.post(
        "/v1/tickets", json={"sessionId": "other-t"}, headers=bearer("web-reader")
    )
    assert refused.status_code == 403
    assert (await client.post("/v1/tickets", json={"sessionId": "web-t"})).status_code == 401
    await asyncio.sleep(2.2)  # the tests' tickets live 2 s
    expired = await client.get(f"/v1/sessions/web-t/stream?ticket={ticket}")
    assert expired.status_code == 401 and "expired" in expired.json()["detail"]


async def test_no_key_in_logs_events_or_error_bodies(
    client: httpx.AsyncClient, bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    bodies: list[str] = []
    for name in KEYS:
        for method, path, body in [
            ("POST", "/v1/sessions/web-leak/messages?wait=true&timeout=0.2", {"text": "hi"}),
            ("POST", "/v1/sessions/web-leak/messages", {"text": ""}),
            ("POST", "/v1/sessions/bad*id/messages", {"text": "x"}),
            ("GET", "/v1/sessions/other-leak/events", None),
            ("POST", "/v1/tickets", {"sessionId": "web-leak"}),
        ]:
            r = await client.request(method, path, headers=bearer(name), json=body)
            bodies.append(r.text + str(r.headers))
    r = await client.get("/v1/sessions", headers={"Authorization": f"Bearer {KEYS['admin'][0]}x"})
    bodies.append(r.text)
    r = await client.get(f"/v1/sessions/web-leak/stream?ticket={KEYS['admin'][0]}")
    assert r.status_code == 401
    bodies.append(r.text)
    server_logs = "\n".join(  # the client's own log (httpx) names the URLs it was given
        f"{r.name} {r.getMessage()}"
        for r in caplog.records
        if not r.name.startswith(("httpx", "httpcore"))
    )
    log_text = "\n".join(bodies) + server_logs
    events = b"".join(encode(s.event) for s in await bus.store.read_session("web-leak"))
    assert events  # the turn ran
    for key, _, _ in KEYS.values():
        assert key not in log_text and key.encode() not in events
    assert "POST /v1/sessions/web-leak/messages 200 admin" in server_logs
    assert "GET /v1/sessions/web-leak/stream 401 -" in server_logs
    assert "?ticket" not in server_logs and "uvicorn.access" not in server_logs


def test_without_keys_only_loopback_is_served() -> None:
    auth = Authenticator(None)
    assert auth.principal(None, "127.0.0.1").name == "loopback"
    assert auth.principal(None, "::1").name == "loopback"
    with pytest.raises(Problem) as refused:
        auth.principal("Bearer anything", "10.1.2.3")
    assert refused.value.status == 403


def test_a_bad_keys_file_says_what_is_wrong_without_the_value(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(
        yaml.safe_dump({"keys": [{"name": "k", "key": "plain-secret", "scopes": ["read"]}]})
    )
    with pytest.raises(ValueError, match="sha256") as bad:
        load_keys(path)
    assert "plain-secret" not in str(bad.value)


async def test_a_public_address_with_keys_is_served(nats_server: EmbeddedServer) -> None:
    from turnstream.http.app import bind

    sock = bind("0.0.0.0:0", has_keys=True)
    sock.close()
