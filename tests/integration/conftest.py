"""A real nats-server per test module (free loopback port, temporary store)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from turnstream.approval import app as approval
from turnstream.audit import app as audit
from turnstream.bus import Bus, connect
from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.streams import StreamLimits
from turnstream.context import ContextRegistry
from turnstream.core.events import Event
from turnstream.core.subjects import Subjects
from turnstream.gateway import app as gateway
from turnstream.hooks import HookRegistry
from turnstream.settings import Settings
from turnstream.tool_executor import app as tool_executor
from turnstream.tools import ToolRegistry
from turnstream.turn_runner import app as turn_runner

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def log_partitions() -> int:
    """How many streams the module's log is (a module overrides this fixture, or
    parametrizes it, to run at N > 1: the server gets the subject mapping for N)."""
    return 1


@pytest.fixture(scope="module")
def nats_server(
    tmp_path_factory: pytest.TempPathFactory, log_partitions: int
) -> Iterator[EmbeddedServer]:
    store = tmp_path_factory.mktemp("nats")
    subjects = Subjects("ts", log_partitions)
    with EmbeddedServer(store, log_file=store / "server.log", subjects=subjects) as server:
        yield server


@pytest.fixture(scope="module")
async def bus(nats_server: EmbeddedServer) -> AsyncIterator[Bus]:
    bus = await connect(nats_server.url, nats_server.subjects, ensure=StreamLimits())
    yield bus
    await bus.close()


@contextlib.asynccontextmanager
async def running_services(
    settings: Settings | Callable[[str], Settings],
    bus: Bus | None = None,
    *,
    tools: ToolRegistry | None = None,
    hooks: HookRegistry | None = None,
    context: ContextRegistry | None = None,
    with_audit: bool = False,
    settle_s: float = 0.4,
) -> AsyncIterator[None]:
    """Every service as a task on its own connection, and the audit service `with_audit`;
    stopped on exit. `settings` is every service's, or a function giving each service's from
    its name (`gateway`, `turn-runner`, …: its NATS user in `ops/accounts.conf`)."""
    of = settings if callable(settings) else lambda _service: settings
    stop = asyncio.Event()
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(gateway.serve(of("gateway"), stop, tools=tools))
        runner = turn_runner.serve(
            of("turn-runner"), stop, tools=tools, hooks=hooks, context=context
        )
        tasks.create_task(runner)
        tasks.create_task(approval.serve(of("approval"), stop))
        tasks.create_task(tool_executor.serve(of("tool-executor"), stop, tools=tools))
        if with_audit:
            tasks.create_task(audit.serve(of("audit"), stop))
        await asyncio.sleep(settle_s)
        try:
            yield
        finally:
            stop.set()


def settings_for(server: EmbeddedServer, tmp: Path, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "workspace": tmp / "workspace",
        "security_mode": "auto",
        "log_partitions": server.subjects.log_partitions,
    }
    values.update(overrides)
    return Settings(nats_url=server.url, data_dir=tmp, **values)  # type: ignore[arg-type]


def anthropic_settings(
    server: EmbeddedServer, tmp: Path, base_url: str, **overrides: object
) -> Settings:
    """Settings for turns answered by a fake Anthropic server (`tests.providers`) at
    `base_url`, as model `claude-fake-1`."""
    return settings_for(
        server, tmp, provider="anthropic", model="claude-fake-1", base_url=base_url, **overrides
    )


async def events_of(bus: Bus, session: str) -> list[Event]:
    return [s.event for s in await bus.store.read_session(session)]


def only(events: list[Event], cls: type) -> list[Any]:
    return [e for e in events if isinstance(e, cls)]


async def wait_for(
    bus: Bus, session: str, found: Callable[[list[Event]], Any], timeout: float = 30
) -> list[Event]:
    """The session's events once `found(events)` holds."""
    async with asyncio.timeout(timeout):
        while True:
            events = await events_of(bus, session)
            if found(events):
                return events
            await asyncio.sleep(0.05)
