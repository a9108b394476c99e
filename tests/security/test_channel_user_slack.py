"""The Slack channel answers as its own NATS user (`channel-slack`), every service under its
own, against a real nats-server loaded with the shipped ops/accounts.conf: what it needs
(publish to `ts.in`, its durable, the live tokens, its bucket, adding a shared file to the
object store) is allowed, and nothing it does is refused."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from pathlib import Path

import pytest

pytest.importorskip("slack_bolt")

from tests.channels.fake_slack import FakeSlack
from tests.channels.test_telegram_files import BIG_PDF
from tests.integration.conftest import running_services
from tests.security.conftest import SecureServer, apply_as_operator
from tests.security.test_identities import as_user, settings
from turnstream.bus.objects import read_attachment
from turnstream.channels import slack as slack_channel

pytestmark = pytest.mark.integration
REPLY = "hello from the agent"
FILED = "got the file"


async def test_the_slack_channel_answers_as_its_own_user(
    secure_server: SecureServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await apply_as_operator(secure_server)
    (tmp_path / "script.yaml").write_text(f'replies:\n  - text: "{REPLY}"\n  - text: "{FILED}"\n')
    scripted = tmp_path / "script.yaml"
    caplog.set_level(logging.INFO)
    async with (
        FakeSlack() as fake,
        running_services(lambda user: settings(secure_server, user, tmp_path, script=scripted)),
    ):
        monkeypatch.setenv("TURNSTREAM_SLACK_BOT_TOKEN", fake.bot_token)
        monkeypatch.setenv("TURNSTREAM_SLACK_APP_TOKEN", fake.app_token)
        own = settings(
            secure_server,
            "channel-slack",
            tmp_path,
            slack_api_url=fake.api_url,
            slack={"dm_policy": "open", "stream_interval_s": 0.2},
        )
        stop = asyncio.Event()
        channel = asyncio.create_task(slack_channel.serve(own, stop))
        try:
            await fake.socket.wait_connected()
            _event, root = await fake.user_says("D0SEC", "U0ALICE", "hi")
            await said(fake, REPLY)
            files = [("spec.pdf", "application/pdf", BIG_PDF)]  # over the inline bound
            await fake.user_says("D0SEC", "U0ALICE", "and this?", thread_ts=root, files=files)
            await said(fake, FILED)
        finally:
            stop.set()
            await asyncio.wait_for(channel, 15)
    assert "violation" not in caplog.text.lower()
    runner = await as_user(secure_server, "turn-runner")
    try:
        assert await read_attachment(runner, hashlib.sha256(BIG_PDF).hexdigest()) == BIG_PDF
    finally:
        await runner.close()


async def said(fake: FakeSlack, text: str) -> None:
    async with asyncio.timeout(60):
        while not any(m.text == text and not m.streaming for m in fake.bot_messages("D0SEC")):  # noqa: ASYNC110 (polls the fake's state)
            await asyncio.sleep(0.05)
