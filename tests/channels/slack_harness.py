"""The Slack channel in-process beside the services and a real nats-server, Slack played by
the fake (`tests.channels.fake_slack`): what `test_slack` and `test_slack_http` share."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.channels.fake_slack import FakeSlack
from tests.integration.conftest import events_of, running_services, settings_for
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.channels import slack as slack_channel
from turnstream.core.events import TurnEnded
from turnstream.settings import Settings

REPLY = "Hello from **turnstream**: " + " ".join(f"w{i}" for i in range(12))
SCRIPT = f"""
replies:
  - text: "{REPLY}"
    delay_ms: 60
"""
TOOL_SCRIPT = """
replies:
  - text: "writing a note"
    tool_calls: [{name: write_file, arguments: {path: note.txt, content: "hi"}}]
  - text: "done: {last_tool_result:40}"
"""


@contextlib.asynccontextmanager
async def channel_up(
    server: EmbeddedServer,
    bus: Bus,
    tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    script: str = SCRIPT,
    http: bool = False,
    **overrides: Any,
) -> AsyncIterator[tuple[FakeSlack, Settings]]:
    """The services, the fake Slack and the Slack channel, all in this process; the channel
    on Socket Mode, or (`http`) on the Events API over HTTP."""
    (tmp / "script.yaml").write_text(script)
    port = free_port()
    url = f"http://127.0.0.1:{port}/slack/events" if http else None
    async with FakeSlack(ack_timeout=2.0, events_url=url) as fake:
        monkeypatch.setenv("TURNSTREAM_SLACK_BOT_TOKEN", fake.bot_token)
        if http:
            monkeypatch.delenv("TURNSTREAM_SLACK_APP_TOKEN", raising=False)
            monkeypatch.setenv("TURNSTREAM_SLACK_SIGNING_SECRET", fake.signing_secret)
            monkeypatch.setenv("TURNSTREAM_SLACK_HTTP_ADDR", f"127.0.0.1:{port}")
        else:
            monkeypatch.setenv("TURNSTREAM_SLACK_APP_TOKEN", fake.app_token)
        policy = {"dm_policy": "open", "stream_interval_s": 0.2} | overrides.pop("slack", {})
        settings = settings_for(
            server,
            tmp,
            script=tmp / "script.yaml",
            slack_api_url=fake.api_url,
            slack=policy,
            **overrides,
        )
        stop = asyncio.Event()
        async with running_services(settings, bus):
            task = asyncio.create_task(slack_channel.serve(settings, stop, bus))
            try:
                if http:
                    await until(lambda: listening(port))
                else:
                    await fake.socket.wait_connected()
                yield fake, settings
            finally:
                stop.set()
                await asyncio.wait_for(task, 15)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def session_of(channel: str, thread_ts: str) -> str:
    return f"slack-{channel}-{thread_ts.replace('.', '_')}"


async def until(check: Any, timeout: float = 60) -> None:
    async with asyncio.timeout(timeout):
        while True:
            if await check() if asyncio.iscoroutinefunction(check) else check():
                return
            await asyncio.sleep(0.05)


async def ended(bus: Bus, session: str, turns: int = 1, timeout: float = 60) -> list[Any]:
    async def done() -> bool:
        return sum(isinstance(e, TurnEnded) for e in await events_of(bus, session)) >= turns

    await until(done, timeout)
    return await events_of(bus, session)


async def cli(server: EmbeddedServer, *args: str) -> tuple[int, str]:
    """`turnstream channels pairing <args> --platform slack`, as the owner runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTREAM_")}
    env.update(TURNSTREAM_NATS_URL=server.url, TURNSTREAM_CONFIG=os.devnull + ".absent.yaml")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "turnstream.cli",
        "channels",
        "pairing",
        *args,
        "--platform",
        "slack",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await process.communicate()
    return int(process.returncode or 0), out.decode()
