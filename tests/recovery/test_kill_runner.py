"""Crash recovery with real processes: kill -9 the turn-runner at chosen points of a turn,
start it again, and check the invariants from the log (exactly one terminal event, the
turn completes, each tool side effect at most once)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from turnstream.bus import Bus, connect
from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.streams import StreamLimits
from turnstream.client import message_command, publish_command
from turnstream.core.events import Event, ToolInvocationSucceeded, TurnEnded
from turnstream.core.subjects import Subjects

pytestmark = pytest.mark.e2e
SERVICES = ("gateway", "turn_runner", "approval", "tool_executor")
SCRIPT = """
replies:
  - tool_calls: [{name: write_file, arguments: {path: runs.txt, content: "ran\\n", append: true}}]
  - text: "done after {last_tool_result}"
    delay_ms: 300
"""


class Deployment:
    def __init__(self, root: Path, url: str) -> None:
        self.root, self.url = root, url
        (root / "workspace").mkdir(exist_ok=True)
        (root / "script.yaml").write_text(SCRIPT)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTREAM_")}
        self.env.update(
            TURNSTREAM_NATS_URL=url,
            TURNSTREAM_DATA_DIR=str(root),
            TURNSTREAM_WORKSPACE=str(root / "workspace"),
            TURNSTREAM_SCRIPT=str(root / "script.yaml"),
            TURNSTREAM_SECURITY_MODE="auto",
            TURNSTREAM_CONFIG=str(root / "absent.yaml"),
        )
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str) -> None:
        log = open(self.root / f"{name}.log", "ab")
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", f"turnstream.{name}"], env=self.env, stdout=log, stderr=log
        )
        log.close()

    def kill9(self, name: str) -> None:
        proc = self.procs[name]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture
async def deployment(tmp_path: Path) -> AsyncIterator[tuple[Deployment, Bus]]:
    with EmbeddedServer(tmp_path / "nats") as server:
        bus = await connect(server.url, Subjects("ts"), ensure=StreamLimits())
        d = Deployment(tmp_path, server.url)
        for name in SERVICES:
            d.start(name)
        await asyncio.sleep(2.0)
        try:
            yield d, bus
        finally:
            d.stop_all()
            await bus.close()


async def wait_for(bus: Bus, session: str, kind: str, timeout: float = 20) -> Event:
    """The first event of `kind` in the session (already there, or when it comes)."""
    for _ in range(int(timeout / 0.05)):
        for stored in await bus.store.read_session(session):
            if stored.event.type == kind:
                return stored.event
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {kind} in {session} within {timeout} s")


@pytest.mark.parametrize(
    "kill_after",
    [
        "ToolInvocationProposed",  # waiting for the approval
        "ToolInvocationSucceeded",  # the tool ran; the result not yet taken in
        "ProviderRequestStarted#2",  # the last model call in flight (a slow reply)
    ],
)
async def test_a_killed_runner_restarts_and_the_turn_completes_once(
    deployment: tuple[Deployment, Bus], kill_after: str
) -> None:
    d, bus = deployment
    session = "crash-" + kill_after.replace("#", "-").lower()
    kind, _, nth = kill_after.partition("#")
    seen: asyncio.Queue[Any] = asyncio.Queue()
    sub = await bus.nc.subscribe(bus.subjects.log(session, kind), cb=seen.put)
    await publish_command(bus, session, message_command(session, "write it down"))
    for _ in range(int(nth or 1)):
        await asyncio.wait_for(seen.get(), 20)
    await sub.unsubscribe()
    d.kill9("turn_runner")
    await asyncio.sleep(0.5)  # the rest of the deployment goes on meanwhile
    d.start("turn_runner")
    ended = await wait_for(bus, session, "TurnEnded", timeout=30)
    await asyncio.sleep(1.0)  # anything appended twice would be there by now
    events = [s.event for s in await bus.store.read_session(session)]
    assert [e.type for e in events].count("TurnEnded") == 1
    assert isinstance(ended, TurnEnded) and ended.data.status == "completed", ended
    assert "done after" in (ended.data.reply or "")
    assert len([e for e in events if isinstance(e, ToolInvocationSucceeded)]) == 1
    runs = (d.root / "workspace" / "runs.txt").read_text().splitlines()
    assert runs == ["ran"]
    assert events[-1].type == "SessionTurnEnd"
