"""Replies that start no turn (a pairing code, a refused file) are posted once per platform
message: Telegram re-sending an update the channel already answered does not answer it
again (each is recorded as a turn's message is: `channels.posting.Poster.notice`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.channels.conftest import channel_process, wait_polling
from tests.channels.fake_telegram import FakeTelegram
from tests.integration.conftest import settings_for
from tests.polling import eventually
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer

pytestmark = pytest.mark.integration


async def test_a_redelivered_refusal_is_told_once(
    nats_server: EmbeddedServer, bus: Bus, fake: FakeTelegram, tmp_path: Path
) -> None:
    settings_for(nats_server, tmp_path)  # the streams and buckets; no turn is wanted
    allowed = {"TURNSTREAM_TELEGRAM__ALLOW_FROM": '["72"]'}  # 71: a stranger, paired first
    with channel_process(nats_server, fake, tmp_path, **allowed):
        await wait_polling(fake)
        stranger = await fake.say("hi", chat_id=44, user_id=71)
        await eventually(lambda: len(fake.sent(44)) == 1)
        exe = await fake.send_file(
            b"MZ", document=("a.exe", "application/x-msdownload"), chat_id=45, user_id=72
        )
        await eventually(lambda: len(fake.sent(45)) == 1)
        await fake.redeliver(stranger)  # Telegram sends both again
        await fake.redeliver(exe)
        await fake.say("hello?", chat_id=44, user_id=71)  # after them, in order
        await eventually(lambda: len(fake.sent(44)) >= 2)
    assert len(fake.sent(44)) == 2, "the code once for each message, not for the re-sent one"
    (refused,) = fake.sent(45)
    assert "a.exe" in refused.text and "not taken" in refused.text
