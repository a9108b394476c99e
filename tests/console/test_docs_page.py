"""The API's docs page (`/docs`, linked from the console) in Chromium with no internet: every
request that leaves the app is refused, and Swagger UI still draws the routes."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from tests.console.conftest import open_page
from turnstream.http.app import create_app
from turnstream.settings import Settings


async def test_the_docs_page_draws_the_api_offline(browser: Any, artifacts: Path) -> None:
    app = create_app(Settings())
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 1234))
    left: list[str] = []
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://local") as http,
        open_page(browser, "http://local") as page,
    ):

        async def offline(route: Any) -> None:
            url = urlsplit(route.request.url)
            if url.hostname != "local":  # the internet: not there
                left.append(route.request.url)
                await route.abort("internetdisconnected")
                return
            answer = await http.get(url.path + (f"?{url.query}" if url.query else ""))
            await route.fulfill(
                status=answer.status_code, headers=dict(answer.headers), body=answer.content
            )

        await page.route("**/*", offline)
        await page.goto("/docs")
        await page.locator(".opblock").first.wait_for()
        assert await page.locator(".opblock").count() >= 10
        assert await page.get_by_text("/v1/sessions/{id}/messages").count() >= 1
        await page.screenshot(path=str(artifacts / "docs-offline.png"))
    assert left == [], left
    assert page.errors == [], page.errors
