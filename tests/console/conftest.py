"""The console in a real browser: Debian's chromium (`/usr/bin/chromium`) driven by
playwright, against a real stack: a nats-server per module, every service in-process (as
`tests/http` runs them) and the HTTP app on a real socket.

Skipped, saying why, only when there is no `/usr/bin/chromium` (`.ci/run` installs it)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.http.conftest import FAST, all_services
from tests.integration.conftest import bus, log_partitions, nats_server
from turnstream.bus.embedded import free_port
from turnstream.http.app import bind, serve
from turnstream.http.context import Options
from turnstream.settings import Settings

__all__ = ["bus", "log_partitions", "nats_server"]
CHROMIUM = Path("/usr/bin/chromium")
REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(
    os.environ.get("TURNSTREAM_ARTIFACTS", Path(tempfile.gettempdir()) / "turnstream-artifacts")
)

try:
    import playwright.async_api as playwright
except ImportError:  # pragma: no cover - a dev install has it (pyproject's dev extra)
    playwright = None  # type: ignore[assignment]


if playwright is not None:
    # two shared cores and other suites running: wait longer than playwright's 5 s default
    playwright.expect.set_options(timeout=15_000)


def need_browser() -> None:
    """Skip, saying why, when the browser tests cannot run here."""
    if not CHROMIUM.exists():
        pytest.skip(
            "no /usr/bin/chromium: `apt-get install -y chromium` (.ci/run does) to run the "
            "console's browser tests"
        )
    if playwright is None:
        pytest.skip("playwright is not installed: pip install -e '.[dev]'")


def script(replies: list[dict[str, Any]]) -> str:
    """A script with these replies and the built-in demo's workflow stages."""
    demo = yaml.safe_load((REPO / "services/turnstream/providers/demo.yaml").read_text())
    return yaml.safe_dump({"replies": replies, "stages": demo["stages"]})


@dataclass
class App:
    """The HTTP app on a fixed port, so a test can stop it and start it again."""

    settings: Settings
    options: Options = field(default_factory=lambda: FAST)
    port: int = field(default_factory=free_port)
    task: asyncio.Task[None] | None = None
    stop: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        sock = bind(f"127.0.0.1:{self.port}", self.settings.http_keys_file is not None)
        self.stop = asyncio.Event()
        ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.task = asyncio.create_task(
            serve(
                self.settings, self.stop, sock=sock, options=self.options, on_ready=ready.set_result
            )
        )
        await asyncio.wait_for(ready, 15)

    async def halt(self) -> None:
        assert self.stop is not None and self.task is not None
        self.stop.set()
        await asyncio.wait_for(self.task, 15)


@contextlib.asynccontextmanager
async def stack(settings: Settings, bus: Any) -> AsyncIterator[App]:
    async with all_services(settings, bus):
        app = App(settings)
        await app.start()
        try:
            yield app
        finally:
            await app.halt()


class Errors(list[str]):
    """JavaScript errors and failed requests a page logged: each test asserts none."""

    def watch(self, page: Any) -> None:
        page.on("pageerror", lambda exc: self.append(f"pageerror: {exc}"))
        page.on(
            "console",
            lambda msg: (
                self.append(f"console.{msg.type}: {msg.text}") if msg.type == "error" else None
            ),
        )


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Any]:
    need_browser()
    async with playwright.async_playwright() as p:
        browser = await p.chromium.launch(executable_path=str(CHROMIUM))
        try:
            yield browser
        finally:
            await browser.close()


@pytest.fixture(scope="module")
def artifacts(request: pytest.FixtureRequest) -> Iterator[Path]:
    folder = ARTIFACTS / request.module.__name__.rsplit(".", 1)[-1]
    folder.mkdir(parents=True, exist_ok=True)
    yield folder
    print(f"\nconsole screenshots: {folder}")


async def client(url: str, key: str | None = None) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.AsyncClient(base_url=url, timeout=30, headers=headers)


@contextlib.asynccontextmanager
async def open_page(
    browser: Any, url: str, width: int = 1360, height: int = 900
) -> AsyncIterator[Any]:
    """A page in a browser context of its own, the errors it logs in `page.errors`."""
    context = await browser.new_context(base_url=url, viewport={"width": width, "height": height})
    page = await context.new_page()
    page.errors = Errors()
    page.errors.watch(page)
    try:
        yield page
    finally:
        await context.close()


@pytest.fixture(scope="module")
async def app(settings: Settings, bus: Any) -> AsyncIterator[App]:
    """The stack on the module's `settings` (a module that needs another defines its own)."""
    async with stack(settings, bus) as app:
        yield app


@pytest.fixture(scope="module")
async def http(app: App) -> AsyncIterator[httpx.AsyncClient]:
    async with await client(app.url) as http:
        yield http


@pytest.fixture
async def page(browser: Any, app: App) -> AsyncIterator[Any]:
    """A fresh page per test, which must log no JavaScript error."""
    async with open_page(browser, app.url) as page:
        yield page
    assert page.errors == [], page.errors
