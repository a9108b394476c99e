"""The Telegram channel as a user runs it: a real nats-server per module, the services in
process (as the integration tests run them), a fake Telegram Bot API (`fake_telegram`) and
the channel as its own process (`python -m turnstream.channels.telegram`), so a test can
kill it with SIGKILL and start it again."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.channels.fake_telegram import FakeTelegram
from tests.integration.conftest import bus, log_partitions, nats_server, settings_for
from turnstream.bus.embedded import EmbeddedServer

__all__ = ["bus", "log_partitions", "nats_server", "settings_for"]
pytestmark = pytest.mark.integration
TOKEN = "123456:AAH-test-token-that-must-never-leak-0123456789"


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    server = FakeTelegram(TOKEN)
    await server.start()
    yield server
    await server.stop()


class ChannelProcess:
    """`python -m turnstream.channels.telegram` against `server` and `fake`; its output in
    `log` (appended across restarts)."""

    def __init__(self, server: EmbeddedServer, fake: FakeTelegram, tmp: Path, **env: str) -> None:
        self.log = tmp / "channel-telegram.log"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTREAM_")}
        self.env.update(
            TURNSTREAM_NATS_URL=server.url,
            TURNSTREAM_DATA_DIR=str(tmp),
            TURNSTREAM_CONFIG=str(tmp / "absent.yaml"),
            TURNSTREAM_TELEGRAM_BOT_TOKEN=TOKEN,
            TURNSTREAM_TELEGRAM_API_URL=fake.url,
            TURNSTREAM_TELEGRAM__STREAM_INTERVAL_S="0.3",
        )
        self.env.update(env)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "turnstream.channels.telegram"],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def kill(self) -> None:
        """SIGKILL: no drain, no goodbye."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return int(self.process.returncode)

    def output(self) -> str:
        return self.log.read_text() if self.log.exists() else ""


@contextlib.contextmanager
def channel_process(
    server: EmbeddedServer, fake: FakeTelegram, tmp: Path, **env: str
) -> Iterator[ChannelProcess]:
    channel = ChannelProcess(server, fake, tmp, **env)
    channel.start()
    try:
        yield channel
    finally:
        channel.stop()


async def wait_polling(fake: FakeTelegram, polls: int = 1, timeout: float = 20) -> None:
    """Until the channel has polled `polls` times (it is connected and listening)."""
    deadline = time.monotonic() + timeout
    while len(fake.of("getUpdates")) < polls:
        assert time.monotonic() < deadline, "the channel never polled"
        await asyncio.sleep(0.05)
