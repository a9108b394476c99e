"""The audit view on a log that breaks every invariant: each check shows its violations,
and each violation links to the session replayed at the event behind it. Only the audit
service and the HTTP app run (a hand-built log needs no runner)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.console.conftest import App, open_page, playwright
from tests.integration.conftest import settings_for
from tests.unit.audit_events import ended, start, tool_run, turn
from turnstream.audit import app as audit
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.settings import Settings

pytestmark = pytest.mark.integration
expect = playwright.expect if playwright else None


@pytest.fixture(scope="module")
async def app(
    nats_server: EmbeddedServer, bus: Bus, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[App]:
    settings: Settings = settings_for(nats_server, tmp_path_factory.mktemp("audit-view"))
    now = datetime.now(UTC)
    await bus.store.append_facts(
        [
            *turn("bad-log", "t1"),
            ended("bad-log", "t1", "failed"),  # a second terminal event
            start("bad-log", "t2"),
            *tool_run("bad-log", "t2", "inv-x", approved=False),
            ended("bad-log", "t2"),
            start("bad-log", "t3", at=now - timedelta(hours=2)),  # never ends
        ]
    )
    stop = asyncio.Event()
    task = asyncio.create_task(audit.serve(settings, stop))
    app = App(settings)
    await app.start()
    try:
        yield app
    finally:
        await app.halt()
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 15)


async def test_each_violation_links_to_its_event(
    browser: Any, app: App, bus: Bus, artifacts: Path
) -> None:
    async with open_page(browser, app.url) as page:
        for _ in range(100):  # the audit service folds the log and appends its findings
            page_ = await bus.store.read_session("bad-log")
            if sum(s.event.type == "AuditViolation" for s in page_) >= 3:
                break
            await asyncio.sleep(0.1)
        await page.goto("/#/audit")
        results = page.locator("#checks .result")
        for i in range(3):
            await expect(results.nth(i)).to_contain_text("✘ 1 violation")
        rows = page.locator("table.violations tbody tr")
        await expect(rows).to_have_count(3)
        await page.screenshot(path=artifacts / "audit-violations.png", full_page=True)
        unapproved = rows.filter(has_text="unapproved_tool_run")
        link = unapproved.locator("a", has_text="event")
        seq = int((await link.text_content() or "").split()[-1])
        await link.click()
        await expect(page.locator("#replay-mode")).to_have_text(f"at seq {seq}")
        await expect(page.locator("#replay-label")).to_contain_text("ToolInvocationStarted")
        await expect(page.locator(".lane.at")).to_have_attribute("data-turn", "t2")
        await expect(page.locator("#notes .session-note.bad")).not_to_have_count(0)
        await expect(page.locator(".lane.at .call")).to_contain_text("read_file")
        await expect(page.locator("#replay-state .replay-grid")).to_contain_text("t2")
        await page.screenshot(path=artifacts / "audit-linked-event.png")
    assert page.errors == []
