"""The Telegram channel end to end: the channel process, the services, a real nats-server
and a fake Bot API that records every call (issue 37)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.channels.conftest import TOKEN, channel_process, wait_polling
from tests.channels.fake_telegram import FakeTelegram, eventually
from tests.integration.conftest import events_of, running_services, settings_for
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.core.events import TurnEnded

pytestmark = pytest.mark.integration
REPLY = "Hello there, this reply is streamed to the chat one word at a time until done"
SCRIPT = f"""
replies:
  - text: "{REPLY}"
    delay_ms: 60
"""


def script(tmp: Path, text: str = SCRIPT) -> Path:
    path = tmp / "script.yaml"
    path.write_text(text)
    return path


async def test_a_dm_gets_a_streamed_reply_and_exactly_one_final_message(
    nats_server: EmbeddedServer, bus: Bus, fake: FakeTelegram, tmp_path: Path
) -> None:
    settings = settings_for(nats_server, tmp_path, script=script(tmp_path))
    async with running_services(settings):
        with channel_process(
            nats_server, fake, tmp_path, TURNSTREAM_TELEGRAM__DM_POLICY="open"
        ) as channel:
            await wait_polling(fake)
            await fake.say("hi", chat_id=42)
            final = await eventually(lambda: [m for m in fake.sent(42) if m.text == REPLY])
            events = await events_of(bus, "telegram-42")
            assert len([e for e in events if isinstance(e, TurnEnded)]) == 1
            drafts = fake.of("sendMessageDraft")
            assert len(drafts) >= 2, "the reply was streamed as drafts"
            assert drafts[-1].params["text"] != REPLY or len(drafts) > 2
            assert all(REPLY.startswith(d.params["text"].rstrip("…")[:10]) for d in drafts)
            assert fake.of("sendChatAction")[0].params["action"] == "typing"
            assert len(final) == 1 and len(fake.sent(42)) == 1, "one final message"
            assert channel.stop() == 0
    assert TOKEN not in channel.output()
