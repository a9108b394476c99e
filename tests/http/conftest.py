"""The HTTP face over a real socket: a real nats-server per module, the services running
in-process (as the integration tests run them), the app served by uvicorn on port 0."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import (
    bus,
    log_partitions,
    nats_server,
    running_services,
    settings_for,
)
from turnstream.audit import app as audit
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.http.app import bind, serve
from turnstream.http.context import Options
from turnstream.settings import Settings

__all__ = ["bus", "log_partitions", "nats_server"]
pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
replies:
  - text: "echo: {input}"
  - text: "writing a note"
    tool_calls: [{name: write_file, arguments: {path: note.txt, content: "hi"}}]
  - text: "done: {last_tool_result:60}"
"""
"""Per session: the 1st turn echoes, the 2nd asks to write a file (a prompt in `ask` mode)."""

FAST = Options(accept_timeout_s=5, wait_default_s=10, ping_s=0.3, ticket_ttl_s=2)


@contextlib.asynccontextmanager
async def http_app(settings: Settings, options: Options = FAST) -> AsyncIterator[str]:
    """The app on a free loopback port, with its own NATS connection; yields its URL."""
    sock = bind("127.0.0.1:0", settings.http_keys_file is not None)
    stop = asyncio.Event()
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        serve(settings, stop, sock=sock, options=options, on_ready=ready.set_result)
    )
    try:
        yield await asyncio.wait_for(ready, 15)
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)


@contextlib.asynccontextmanager
async def all_services(settings: Settings, bus: Bus) -> AsyncIterator[None]:
    stop = asyncio.Event()
    async with running_services(settings, bus):
        task = asyncio.create_task(audit.serve(settings, stop))
        try:
            yield
        finally:
            stop.set()
            await task


@pytest.fixture(scope="module")
def settings(nats_server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    tmp = tmp_path_factory.mktemp("http")
    script = tmp / "script.yaml"
    script.write_text(SCRIPT)
    return settings_for(
        nats_server,
        tmp,
        script=script,
        security_mode="ask",
        workflows=REPO / "workflows",
        max_input_bytes=8192,
    )


@pytest.fixture(scope="module")
async def services(settings: Settings, bus: Bus) -> AsyncIterator[Settings]:
    async with all_services(settings, bus):
        yield settings


@pytest.fixture(scope="module")
async def url(services: Settings) -> AsyncIterator[str]:
    async with http_app(services) as url:
        yield url


@pytest.fixture(scope="module")
async def client(url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=url, timeout=20) as client:
        yield client
