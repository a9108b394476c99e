"""The console against a running stack (`ask` mode): a session appears live, tokens stream,
approving in the page lets the tool run, the replay slider shows an earlier state, the
workflow graph follows a running workflow, the stream resumes after a server restart; no
page logs a JavaScript error. Each view is saved as a screenshot (`artifacts`)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.console.conftest import REPO, App, open_page, playwright, script
from tests.integration.conftest import settings_for
from turnstream.bus.embedded import EmbeddedServer
from turnstream.settings import Settings

pytestmark = pytest.mark.integration
expect = playwright.expect if playwright else None
REPLY = "Streaming this reply word by word so that the console can show every token as it comes"
SCRIPT = script(
    [
        {"text": REPLY + ": {input}", "delay_ms": 250},
        {
            "text": "writing a note",
            "tool_calls": [
                {"name": "write_file", "arguments": {"path": "note.txt", "content": "x" * 900}}
            ],
        },
        {"text": "done: {last_tool_result:60}"},
    ]
)
"""Per session: the 1st turn streams slowly (about 4 s: the sessions view, which polls every
2 s, sees it running), the 2nd asks to write a file (a prompt)."""


@pytest.fixture(scope="module")
def settings(nats_server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    tmp = tmp_path_factory.mktemp("console")
    (tmp / "script.yaml").write_text(SCRIPT)
    (tmp / "workspace").mkdir()
    # the demo model priced, so the session's spend shows in dollars
    prices = tmp / "prices.yaml"
    prices.write_text(
        "scripted:\n  demo: {input: 3, output: 15, cache_write: 3.75, cache_read: 0.3}\n"
    )
    return settings_for(
        nats_server,
        tmp,
        script=tmp / "script.yaml",
        security_mode="ask",
        workflows=REPO / "workflows",
        prices=prices,
    )


async def test_a_session_appears_live_while_its_turn_runs(
    page: Any, http: httpx.AsyncClient, artifacts: Path
) -> None:
    await page.goto("/")
    await expect(page.locator("h1")).to_contain_text("Sessions")
    sent = await http.post("/v1/sessions/live-1/messages", json={"text": "hello"})
    assert sent.status_code == 202, sent.text
    row = page.locator('tr[data-session="live-1"]')
    await expect(row.locator(".badge.s-active")).to_be_visible(timeout=10_000)  # still running
    await expect(row.locator(".chip.live")).to_have_text("running")
    await page.screenshot(path=artifacts / "sessions-live.png")
    await expect(row.locator(".badge.s-completed")).to_be_visible(timeout=20_000)
    await page.fill("#search", "no-such-session")
    await expect(row).to_be_hidden()
    await page.fill("#search", "live-")
    await expect(row).to_be_visible()


async def test_tokens_stream_into_the_timeline(
    page: Any, http: httpx.AsyncClient, artifacts: Path
) -> None:
    await page.goto("/#/s/chat-1")
    await expect(page.locator(".session-page[data-loaded]")).to_be_attached()
    await expect(page.locator("#conn")).to_have_text("● live")
    sent = await http.post("/v1/sessions/chat-1/messages", json={"text": "hi there"})
    assert sent.status_code == 202
    text = page.locator(".msg.assistant .text").first
    seen: list[str] = []
    async with asyncio.timeout(20):
        while not seen or not seen[-1].endswith("hi there"):
            now = await text.text_content() if await text.count() else ""
            if now and (not seen or now != seen[-1]):
                seen.append(now)
                if len(seen) == 3:
                    await page.screenshot(path=artifacts / "timeline-streaming.png")
            await asyncio.sleep(0.03)
    partial = [s for s in seen if REPLY.startswith(s.strip()) and s.strip() != REPLY]
    assert len(partial) >= 3, seen  # the reply grew token by token before it was complete
    await expect(page.locator(".lane").first.locator(".badge.s-completed")).to_be_visible()
    await expect(page.locator(".lane").first.locator(".seg")).not_to_have_count(0)
    # what the turn and the session cost: tokens from the log, dollars from the price table
    await expect(page.locator(".lane").first.locator(".tokens")).to_contain_text(
        re.compile(r"in · \d+ out · \$0\.\d{4}")
    )
    await expect(page.locator("#spend")).to_contain_text(re.compile(r"in · \d+ out · \$0\.\d{4}"))
    await page.screenshot(path=artifacts / "timeline-spend.png")


async def test_every_stage_of_a_finished_turn_shows_how_long_it_took(
    page: Any, artifacts: Path
) -> None:
    # most stage ends are carried by the next stage's StagePreFired (`previous`)
    await page.goto("/#/s/chat-1")
    await expect(page.locator(".session-page[data-loaded]")).to_be_attached()
    lane = page.locator(".lane").first
    await expect(lane.locator(".lane-head .badge.s-completed")).to_be_visible()
    await expect(lane.locator(".seg")).to_have_count(5)
    await expect(lane.locator(".seg.open")).to_have_count(0)
    table = lane.locator("details.stage-table")
    await table.locator("summary").click()
    await expect(table.locator("tr")).to_have_count(6)  # a header, then 5 stages
    await expect(table).not_to_contain_text("running")
    await expect(table.locator("tr").nth(1)).to_contain_text("ok")
    await page.screenshot(path=artifacts / "timeline-stages.png", full_page=True)


async def test_approving_in_the_console_lets_the_tool_run(
    page: Any, http: httpx.AsyncClient, settings: Settings, artifacts: Path
) -> None:
    await page.goto("/#/s/chat-1")
    await expect(page.locator("#conn")).to_have_text("● live")
    await page.fill("#composer textarea", "please write the note")
    await page.click("#composer button[value=message]")
    approve = page.locator("button[data-action=approve]")
    await expect(approve).to_be_visible(timeout=15_000)
    assert not (settings.workspace / "note.txt").exists()
    await expect(page.locator(".call .kv details.fold")).to_have_count(1)  # 900 chars: folded
    await page.screenshot(path=artifacts / "timeline-approval.png", full_page=True)
    await approve.click()
    lane = page.locator(".lane").nth(1)
    await expect(lane.locator(".call .badge.c-succeeded")).to_be_visible(timeout=15_000)
    await expect(lane.locator(".lane-head .badge.s-completed")).to_be_visible(timeout=15_000)
    assert (settings.workspace / "note.txt").read_text() == "x" * 900
    await expect(lane.locator(".prompt")).to_contain_text("approved by http:loopback")
    await page.screenshot(path=artifacts / "timeline.png", full_page=True)


async def test_the_replay_slider_shows_the_state_at_an_earlier_event(
    page: Any, artifacts: Path
) -> None:
    await page.goto("/#/s/chat-1")
    await expect(page.locator(".session-page[data-loaded]")).to_be_attached()
    # the slider's label names each event: walk back to the prompt
    slider = page.locator("#slider")
    await slider.focus()
    await page.keyboard.press("End")
    label = page.locator("#replay-label")
    for _ in range(200):
        if "InteractionRequested" in (await label.text_content() or ""):
            break
        await page.keyboard.press("ArrowLeft")
    await expect(label).to_contain_text("InteractionRequested")
    state = page.locator("#replay-state")
    await expect(state.locator("[data-pending]")).to_contain_text("write_file pending")
    await expect(page.locator("#replay-mode")).to_contain_text("at seq")
    await expect(page.locator(".lane.future")).to_have_count(0)
    earlier = int(await state.locator("ol.history").get_attribute("data-count") or -1)
    await page.screenshot(path=artifacts / "replay.png", full_page=True)
    await page.keyboard.press("Home")
    await expect(label).to_contain_text("event 1 of")
    await expect(page.locator(".lane.future")).not_to_have_count(0)
    await page.click("#to-live")
    await expect(page.locator("#replay-mode")).to_have_text("live")
    await page.keyboard.press("End")
    await page.click("#verify")
    await expect(page.locator("#verify-result")).to_contain_text("✔ rebuilt state equals")
    assert earlier >= 0


async def test_the_workflow_graph_follows_a_running_workflow(
    page: Any, http: httpx.AsyncClient, artifacts: Path
) -> None:
    await page.goto("/#/workflows")
    graph = page.locator('.wf-def[data-workflow="review-and-implement"]')
    await expect(graph.locator(".wf-node")).to_have_count(6)  # 5 stages and the onFail one
    await page.screenshot(path=artifacts / "workflows.png", full_page=True)
    await graph.locator("input[name=session]").fill("wf-1")
    await graph.locator("input[name=ctx]").fill('{"task": "document it"}')
    await graph.locator("button").click()
    await expect(page).to_have_url(re.compile(r"#/s/wf-1$"))
    await expect(page.locator('#wf-graph .wf-node[data-stage="plan"]')).to_have_attribute(
        "data-status", "exited", timeout=20_000
    )
    # the demo's stages ask to grant `grep` outside their envelope: the run waits on it
    approve = page.locator("button[data-action=approve]")
    await expect(approve).to_be_visible(timeout=20_000)
    running = page.locator(
        '#wf-graph .wf-node[data-status="act"], #wf-graph .wf-node[data-status="running"]'
    )
    await expect(running).not_to_have_count(0)
    await expect(page.locator("#waiting")).to_have_text("1 approval waiting ↓")
    await page.screenshot(path=artifacts / "workflow-running.png", full_page=True)
    await approve.click()
    await expect(page.locator("#wf-name")).to_contain_text("completed", timeout=30_000)
    await expect(page.locator('#wf-graph .wf-node[data-status="exited"]')).to_have_count(5)
    # its onFail stage, which nothing needed, will not run now: it says so, not "pending"
    await expect(page.locator('#wf-graph .wf-node[data-status="pending"]')).to_have_count(0)
    await expect(page.locator('#wf-graph .wf-node[data-status="not_run"]')).to_have_count(1)
    await expect(page.locator("#state")).to_have_text("completed")  # no lane but the stages'
    await expect(page.locator(".lane")).to_have_count(5)
    await page.screenshot(path=artifacts / "workflow-done.png", full_page=True)


async def test_the_audit_view_runs_its_checks(page: Any, artifacts: Path) -> None:
    await page.goto("/#/audit")
    results = page.locator("#checks .result")
    await expect(results).to_have_count(3)
    for i in range(3):
        await expect(results.nth(i)).to_contain_text("✔ holds")
    await page.click("#verify-all")
    await expect(page.locator("#verify-rows tr")).not_to_have_count(0)
    await expect(page.locator("#verify-rows .muted")).to_have_count(0, timeout=20_000)
    await expect(page.locator("#verify-rows .bad")).to_have_count(0)
    await page.screenshot(path=artifacts / "audit.png", full_page=True)


async def test_phone_width_is_readable(browser: Any, app: App, artifacts: Path) -> None:
    async with open_page(browser, app.url, 390, 844) as page:
        for name, url in [("sessions", "/"), ("session", "/#/s/chat-1")]:
            await page.goto(url)
            await expect(page.locator("main h1").first).to_be_visible()
            await page.wait_for_timeout(500)
            width = await page.evaluate("document.documentElement.scrollWidth")
            assert width <= 390, f"{name}: the page scrolls sideways ({width}px)"
            await page.screenshot(path=artifacts / f"phone-{name}.png", full_page=True)
    assert page.errors == []


async def test_the_stream_resumes_after_the_server_restarts(
    page: Any, app: App, http: httpx.AsyncClient
) -> None:
    await page.goto("/#/s/restart-1")
    await expect(page.locator("#conn")).to_have_text("● live")
    await app.halt()
    await expect(page.locator("#conn")).to_have_text("○ reconnecting…")
    await app.start()
    sent = await http.post("/v1/sessions/restart-1/messages", json={"text": "after restart"})
    assert sent.status_code == 202
    await expect(page.locator("#conn")).to_have_text("● live", timeout=15_000)
    await expect(page.locator(".msg.user")).to_contain_text("after restart", timeout=15_000)
    await expect(page.locator(".lane-head .badge.s-completed")).to_be_visible(timeout=20_000)
    # while the server was down the browser logged its refused connections: not page errors
    page.errors[:] = [e for e in page.errors if "ERR_CONNECTION_REFUSED" not in e]


async def test_the_replay_routes_answer_as_the_slider_reads_them(http: httpx.AsyncClient) -> None:
    events = (await http.get("/v1/sessions/chat-1/events?limit=1000")).json()["items"]
    asked = next(i["seq"] for i in events if i["event"]["type"] == "InteractionRequested")
    at = (await http.get(f"/v1/sessions/chat-1/replay?at={asked}")).json()
    assert at["at"] == asked and at["event"]["type"] == "InteractionRequested"
    assert [p["tool"] for p in at["pendingApprovals"]] == ["write_file"]
    assert at["active"]["stage"] == "TOOL_CALL"
    now = (await http.get("/v1/sessions/chat-1/replay")).json()
    assert now["pendingApprovals"] == [] and now["active"] is None
    assert len(now["history"]) > len(at["history"])
    assert (await http.get("/v1/sessions/chat-1/verify")).json()["equal"] is True
    assert (await http.get("/v1/sessions/nobody/replay")).status_code == 404


async def test_a_follow_up_queues_and_the_hard_stop_ends_the_turn(page: Any) -> None:
    await page.goto("/#/s/stop-1")
    await expect(page.locator("#conn")).to_have_text("● live")
    await page.fill("#composer textarea", "start streaming")
    await page.click("#composer button[value=message]")
    await expect(page.locator(".msg.assistant .text.streaming")).not_to_have_text("")
    await expect(page.locator("#steer")).to_be_enabled()
    await page.fill("#composer textarea", "and then this")
    await page.click("#composer button[value=message]")  # a turn runs: this one waits
    await expect(page.locator(".lane").nth(1)).to_contain_text("queued behind turn")
    await page.click("#int-hard")
    first = page.locator(".lane").first
    await expect(first.locator(".lane-head")).to_contain_text("interrupted")
    await expect(first).to_contain_text("hard interrupt from http:loopback")


async def test_steer_injects_into_the_running_turn(page: Any, artifacts: Path) -> None:
    await page.goto("/#/s/steer-1")
    await expect(page.locator("#conn")).to_have_text("● live")
    await expect(page.locator("#steer")).to_be_disabled()  # no turn runs: nothing to steer
    await page.fill("#composer textarea", "start streaming")
    await page.click("#composer button[value=message]")
    await expect(page.locator(".msg.assistant .text.streaming")).not_to_have_text("")
    await expect(page.locator("#steer")).to_be_enabled()
    await page.fill("#composer textarea", "keep it short")
    await page.click("#steer")
    await expect(page.locator("#composer textarea")).to_have_value("")  # sent
    first = page.locator(".lane").first
    await expect(first).to_contain_text("steering injected: keep it short")
    await expect(first.locator(".msg.steer")).to_contain_text("keep it short")
    await expect(page.locator(".lane")).to_have_count(1)  # steered, not queued behind it
    await page.screenshot(path=artifacts / "timeline-steer.png", full_page=True)
    await expect(first.locator(".lane-head .badge.s-completed")).to_be_visible(timeout=20_000)
    await expect(page.locator("#steer")).to_be_disabled()
