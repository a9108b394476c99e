"""Sub-turns in the console (DESIGN §11): the shipped coordinator (agents/*.md) spawns the
researcher with the scripted provider's demo replies (providers/demo.yaml); the child is
drawn under the spawning tool call, its link opens the child's timeline, the sessions view
shows each session's agent. No page logs a JavaScript error."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import yaml

from tests.console.conftest import REPO, playwright
from tests.integration.conftest import settings_for
from turnstream.bus.embedded import EmbeddedServer
from turnstream.settings import Settings

pytestmark = pytest.mark.integration
expect = playwright.expect if playwright else None


@pytest.fixture(scope="module")
def settings(nats_server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    tmp = tmp_path_factory.mktemp("subturns")
    demo = yaml.safe_load((REPO / "services/turnstream/providers/demo.yaml").read_text())
    script = {"replies": [{"text": "echo: {input}"}], "agents": demo["agents"]}
    (tmp / "script.yaml").write_text(yaml.safe_dump(script))
    (tmp / "workspace").mkdir()
    (tmp / "workspace" / "notes.txt").write_text("some notes")
    return settings_for(
        nats_server, tmp, script=tmp / "script.yaml", agents=REPO / "agents", security_mode="ask"
    )


async def test_a_sync_child_is_drawn_under_its_spawn_call_and_opens(
    page: Any, http: httpx.AsyncClient, artifacts: Path
) -> None:
    await page.goto("/#/s/coord-1")
    await expect(page.locator("#conn")).to_have_text("● live")
    sent = await http.post(
        "/v1/sessions/coord-1/messages", json={"text": "what is here?", "agent": "coordinator"}
    )
    assert sent.status_code == 202, sent.text
    approve = page.locator("button[data-action=approve]")
    call = page.locator('.call:has(.tool:text("spawn"))')
    await expect(call).to_be_visible(timeout=15_000)
    if await approve.count():  # `ask` mode may prompt for the spawn
        await approve.click()
    child = call.locator(".subturns .subturn")
    await expect(child).to_have_count(1, timeout=15_000)
    await expect(child.locator(".chip").first).to_have_text("researcher")
    await expect(child).to_contain_text("sync")
    await expect(child.locator(".badge.s-completed")).to_be_visible(timeout=20_000)
    await expect(child.locator(".muted").first).to_contain_text("ms")
    await expect(page.locator(".lane-head .badge.s-completed")).to_be_visible(timeout=15_000)
    await expect(page.locator("#state")).to_have_text("completed")
    await expect(page.locator(".lane")).to_have_count(1)  # the reply is the call's result
    await expect(page.locator("#waiting")).to_be_hidden()
    await expect(page.locator("#agent")).to_have_text("agent coordinator")
    await expect(call.locator(".subturns")).to_contain_text("tool result")
    await expect(page.locator(".lane")).to_contain_text("message sent to coord-1:sub-")
    child_id = await child.get_attribute("data-child")
    assert child_id and child_id != "coord-1"
    await page.screenshot(path=artifacts / "timeline-subturn.png", full_page=True)
    await child.locator("a.child-link").click()
    await expect(page.locator(".session-head h1")).to_have_text(child_id)
    assert page.url.endswith(f"#/s/{quote(child_id, safe='')}")
    await expect(page.locator(".session-page[data-loaded]")).to_be_attached()
    await expect(page.locator("#agent")).to_have_text("agent researcher")
    await expect(page.locator(".lane").first).to_contain_text("What is in the workspace?")
    await expect(page.locator(".lane .badge.s-completed").first).to_be_visible()
    await expect(page.locator("a.parent-link")).to_have_text("coord-1")
    await page.screenshot(path=artifacts / "timeline-child.png", full_page=True)
    await page.goto("/")
    row = page.locator('tr[data-session="coord-1"]')
    await expect(row.locator("td.agent")).to_have_text("coordinator", timeout=10_000)
    await expect(page.locator(f'tr[data-session="{child_id}"] td.agent')).to_have_text("researcher")
    await page.fill("#search", "coordinator")  # the agent is searched too
    await expect(row).to_be_visible()
    await expect(page.locator(f'tr[data-session="{child_id}"]')).to_be_hidden()
    await page.screenshot(path=artifacts / "sessions-agents.png")
