"""The console behind API keys and at scale: signing in with a key (the streams then open
with tickets), a 50-turn session's timeline (its render time is printed, not asserted), and
the sessions view with 1,000 sessions, a page at a time (render and filter times printed)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.console.conftest import App, client, open_page, playwright, script
from tests.integration.conftest import settings_for
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.core.subjects import session_key
from turnstream.core.summary import SessionSummary
from turnstream.http.auth import hash_key
from turnstream.settings import Settings

pytestmark = pytest.mark.integration
expect = playwright.expect if playwright else None
KEY = "console-test-key-0123456789"
TURNS = 50
BULK = 1000
PAGE = 100
"""Sessions the sessions view shows at first (`console/static/sessions.js`)."""


@pytest.fixture(scope="module")
def settings(nats_server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    tmp = tmp_path_factory.mktemp("console-scale")
    (tmp / "script.yaml").write_text(script([{"text": "echo: {input}"}]))
    keys = tmp / "keys.yaml"
    keys.write_text(
        f'keys:\n  - {{name: ops, key: "{hash_key(KEY)}", scopes: [admin], sessions: "*"}}\n'
    )
    return settings_for(nats_server, tmp, script=tmp / "script.yaml", http_keys_file=keys)


@pytest.fixture(scope="module")
async def http(app: App) -> AsyncIterator[httpx.AsyncClient]:
    async with await client(app.url, KEY) as http:
        yield http


@pytest.fixture(scope="module")
async def page(browser: Any, app: App) -> AsyncIterator[Any]:
    """One signed-in page for the module (the key stays in its local storage)."""
    async with open_page(browser, app.url) as page:
        yield page


@pytest.fixture(autouse=True)
def no_page_errors(request: pytest.FixtureRequest) -> Any:
    yield
    if "page" in request.fixturenames:
        page = request.getfixturevalue("page")
        errors, page.errors[:] = list(page.errors), []
        assert errors == [], errors


async def test_signing_in_with_a_key(page: Any, http: httpx.AsyncClient, artifacts: Path) -> None:
    sent = await http.post("/v1/sessions/keyed/messages?wait=true", json={"text": "hi"})
    assert sent.status_code == 200, sent.text
    await page.goto("/")
    await expect(page.locator("#login")).to_be_visible()
    await page.screenshot(path=artifacts / "login.png")
    await page.fill("#login input[name=key]", "not-the-key")
    await page.click("#login button")
    await expect(page.locator("#login-error")).to_contain_text("unknown API key")
    await page.fill("#login input[name=key]", KEY)
    await page.click("#login button")
    await expect(page.locator('tr[data-session="keyed"]')).to_be_visible()
    await page.click('tr[data-session="keyed"] a')
    await expect(page.locator("#conn")).to_have_text("● live")  # the stream opened with a ticket
    await http.post("/v1/sessions/keyed/messages", json={"text": "second"})
    await expect(page.locator(".lane")).to_have_count(2)
    # the page's 401s before signing in are the API answering, not script errors
    page.errors[:] = [e for e in page.errors if "401" not in e]


async def test_a_50_turn_timeline(page: Any, http: httpx.AsyncClient, artifacts: Path) -> None:
    for i in range(TURNS):
        sent = await http.post("/v1/sessions/long/messages?wait=true", json={"text": f"turn {i}"})
        assert sent.status_code == 200, sent.text
    await page.goto("/#/")
    start = time.perf_counter()
    await page.goto("/#/s/long")
    await expect(page.locator(".session-page[data-loaded]")).to_be_attached(timeout=20_000)
    wall = (time.perf_counter() - start) * 1000
    await expect(page.locator(".lane")).to_have_count(TURNS)
    measured = await page.evaluate("window.__turnstream")
    print(
        f"\n50-turn timeline: rendered in {measured['timelineMs']:.0f} ms in the page "
        f"({wall:.0f} ms from navigation, headless chromium)"
    )
    await page.screenshot(path=artifacts / "timeline-50-turns.png")


async def test_the_sessions_view_with_1000_sessions(
    page: Any, bus: Bus, app: App, artifacts: Path
) -> None:
    kv = await bus.js.key_value(bus.subjects.sessions_bucket)
    now = datetime.now(UTC)
    statuses = ["completed", "failed", "active", "denied"]

    async def put(i: int) -> None:
        summary = SessionSummary(
            f"bulk-{i:04d}",
            status=statuses[i % 4],  # type: ignore[arg-type]
            turns=i % 7 + 1,
            completed=i % 7,
            failed=1 if i % 4 == 1 else 0,
            last_turn=f"turn-{i}",
            last_failure_class="tool_runtime_error" if i % 4 == 1 else None,
            last_reply=f"reply number {i}",
            updated_at=now - timedelta(seconds=i),
        )
        await kv.put(session_key(summary.session_id), summary.to_json())

    # the audit projection as the audit service writes it, for sessions that never ran
    for batch in range(0, BULK, 100):
        await asyncio.gather(*(put(i) for i in range(batch, batch + 100)))
    start = time.perf_counter()
    await page.goto("/#/")
    rows = page.locator("tr[data-session^=bulk-]")
    # a page of the sessions changed last (the last hundred written), with how many there are
    await expect(rows).to_have_count(PAGE, timeout=20_000)
    shown = (time.perf_counter() - start) * 1000
    count = page.locator("#count")
    await expect(count).to_contain_text(f"{PAGE} of ")
    total = int((await count.text_content() or "").split(" of ")[1])
    assert total >= BULK
    await expect(page.locator("#more-note")).to_have_text(f"{PAGE} changed last of {total}")
    await page.click("#more")
    await expect(rows).to_have_count(2 * PAGE)
    start = time.perf_counter()
    await page.fill("#search", "bulk-0999")
    await expect(page.locator("tr[data-session]:visible")).to_have_count(1)
    filtered = (time.perf_counter() - start) * 1000
    await page.fill("#search", "")
    await page.select_option("#status", "failed")  # asked of the server: 200 of the 250
    await expect(page.locator("tr[data-session].st-failed")).to_have_count(2 * PAGE)
    await expect(count).to_contain_text(f"{2 * PAGE} of {total}")
    # a poll redraws only changed rows: the page stays responsive between polls
    busy = await page.evaluate(
        """() => new Promise((done) => {
          let worst = 0, last = performance.now();
          const tick = () => {
            const now = performance.now();
            worst = Math.max(worst, now - last);
            last = now;
            if (now - start < 5000) requestAnimationFrame(tick); else done(worst);
          };
          const start = performance.now();
          requestAnimationFrame(tick);
        })"""
    )
    print(
        f"\n{BULK} sessions: listed in {shown:.0f} ms, one found by search in {filtered:.0f} ms, "
        f"longest frame over 5 s of polling {busy:.0f} ms"
    )
    await page.screenshot(path=artifacts / "sessions-1000.png")
    assert busy < 1000  # no poll froze the page (a generous bound: 2 shared cores)
