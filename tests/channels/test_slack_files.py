"""Files shared with the Slack channel become the turn's attachments (issue 38's chat
door): fetched from the message's `url_private_download` with the bot token as bearer, as
Slack serves them, and given to the model (checked in the body the fake Anthropic API
received). A type not taken is a reply in the thread naming why, never a turn; a file URL
on a host that is not Slack's is never sent the token."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

pytest.importorskip("slack_bolt")

from tests.channels.fake_slack import FakeSlack
from tests.channels.slack_harness import channel_up, ended, session_of, until
from tests.integration.test_attachments import CSV, PNG
from tests.providers.fake_servers import FakeAnthropic, Text
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.core.events import InputAccepted

pytestmark = pytest.mark.integration


async def test_shared_files_reach_the_model_and_a_refused_one_is_told_why(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "workspace").mkdir()
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    async with (
        FakeAnthropic([Text("a dot and a table")]) as model,
        channel_up(
            nats_server,
            bus,
            tmp_path,
            monkeypatch,
            provider="anthropic",
            model="claude-fake-1",
            base_url=model.base_url,
        ) as (fake, _),
    ):
        files = [("shot.png", "image/png", PNG), ("stock.csv", "text/csv", CSV)]
        _event, root = await fake.user_says("D0DM", "U0ALICE", "what are these?", files=files)
        events = await ended(bus, session_of("D0DM", root))
        _event, zipped = await fake.user_says(
            "D0DM", "U0ALICE", "", files=[("a.zip", "application/zip", b"PK\x03\x04")]
        )
        await until(lambda: refusals(fake, zipped))
        # a file URL on another host (here: the fake under another name): no token sent
        evil = fake.files.share(f"http://localhost:{fake.port}", "evil.png", "image/png", PNG)
        message = fake._store("D0DM", "look", "U0ALICE")
        event = fake.message_event(message) | {"subtype": "file_share", "files": [evil]}
        await fake.socket.deliver_event(event)
        await until(lambda: refusals(fake, message.ts))
    (accepted,) = [e for e in events if isinstance(e, InputAccepted)]
    assert [a.name for a in accepted.data.attachments or []] == ["shot.png", "stock.csv"]
    text, image, note = model.requests[0].body["messages"][0]["content"]
    assert text == {"type": "text", "text": "what are these?"}
    assert image["type"] == "image" and image["source"]["media_type"] == "image/png"
    assert base64.b64decode(image["source"]["data"]) == PNG
    assert "stock.csv" in note["text"]
    (refused,) = refusals(fake, zipped)
    assert "a.zip" in refused and "application/zip is not taken" in refused
    (untrusted,) = refusals(fake, message.ts)
    assert "evil.png" in untrusted and "untrusted_host" in untrusted
    assert len(model.requests) == 1, "the refused files started no turn"
    bearer = f"Bearer {fake.bot_token}"
    assert [auth for _, auth in fake.files.downloads] == [bearer, bearer], "evil.png not asked"


def refusals(fake: FakeSlack, thread: str) -> list[str]:
    return [
        m.text
        for m in fake.bot_messages("D0DM")
        if m.thread_ts == thread and "can't take" in m.text
    ]
