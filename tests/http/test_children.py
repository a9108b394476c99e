"""`GET /v1/sessions/{id}`: the session's agent and the sub-turns its turns spawned
(DESIGN §11), read from its log, against the real app, services and nats-server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.http.conftest import all_services, http_app
from tests.integration.conftest import settings_for
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.settings import Settings

pytestmark = pytest.mark.integration

SCRIPT = """
replies:
  - text: "echo: {input}"
agents:
  researcher:
    - text: "researched: {input}"
  spawner:
    - tool_calls: [{name: spawn, arguments: {task: "find the answer", agent: researcher}}]
    - text: "child said: {last_tool_result}"
  asyncer:
    - tool_calls: [{name: spawn, arguments: {task: "later", agent: researcher, mode: async}}]
    - text: "spawned"
    - text: "follow-up: {input}"
"""


@pytest.fixture(scope="module")
async def url(
    nats_server: EmbeddedServer, bus: Bus, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    tmp = tmp_path_factory.mktemp("children")
    (tmp / "script.yaml").write_text(SCRIPT)
    (tmp / "workspace").mkdir()
    agents = tmp / "agents"
    agents.mkdir()
    for name in ("researcher", "spawner", "asyncer"):
        (agents / f"{name}.md").write_text(f"---\nname: {name}\ndescription: {name}\n---\nHi.\n")
    settings: Settings = settings_for(nats_server, tmp, script=tmp / "script.yaml", agents=agents)
    async with all_services(settings, bus), http_app(settings) as url:
        yield url


async def session_when(client: httpx.AsyncClient, sid: str, check: Any) -> dict[str, Any]:
    async with asyncio.timeout(15):
        while True:
            r = await client.get(f"/v1/sessions/{sid}")
            if r.status_code == 200 and check(r.json()):
                return dict(r.json())
            await asyncio.sleep(0.1)


async def test_a_sync_child_is_listed_with_its_agent_status_and_duration(url: str) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=20) as client:
        r = await client.post(
            "/v1/sessions/kid-1/messages?wait=true", json={"text": "go", "agent": "spawner"}
        )
        assert r.status_code == 200, r.text
        body = await session_when(client, "kid-1", lambda b: b["children"])
        assert body["agent"] == "spawner"
        [child] = body["children"]
        assert child["agent"] == "researcher" and child["mode"] == "sync"
        assert child["status"] == "completed" and child["deliveredAs"] == "tool_result"
        assert child["durationMs"] is not None and child["durationMs"] >= 0
        assert child["task"] == "find the answer" and child["depth"] == 1
        [turn] = body["turns"]
        assert child["parentTurnId"] == turn["turnId"] and child["invocationId"]
        kid = await session_when(client, child["childSessionId"], lambda b: b["turns"])
        assert kid["agent"] == "researcher" and kid["children"] == []
        assert child["childTurnId"] == kid["turns"][0]["turnId"]


async def test_an_async_child_is_listed_with_how_its_reply_came_back(url: str) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=20) as client:
        r = await client.post(
            "/v1/sessions/kid-2/messages", json={"text": "go", "agent": "asyncer"}
        )
        assert r.status_code == 202, r.text
        body = await session_when(
            client, "kid-2", lambda b: b["children"] and b["children"][0]["deliveredAs"]
        )
        [child] = body["children"]
        assert child["mode"] == "async" and child["status"] == "completed"
        assert child["deliveredAs"] in ("steering", "follow_up")


async def test_a_session_without_agent_or_children(url: str) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=20) as client:
        r = await client.post("/v1/sessions/kid-3/messages?wait=true", json={"text": "hi"})
        assert r.status_code == 200, r.text
        body = (await client.get("/v1/sessions/kid-3")).json()
        assert body["agent"] is None and body["children"] == []
