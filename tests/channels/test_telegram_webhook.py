"""The Telegram channel in webhook mode (TURNSTREAM_TELEGRAM_WEBHOOK_URL), as its own
process: it sets the webhook with its secret token, answers a real update once its command
is stored and Telegram's re-sending of it is the same turn; as an attacker, an update
POSTed without the secret token or with another is refused 401 and never becomes a turn."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.channels.conftest import channel_process
from tests.channels.fake_telegram import FakeTelegram
from tests.channels.fake_telegram_webhook import post_update
from tests.channels.slack_harness import free_port, listening, until
from tests.integration.conftest import events_of, running_services, settings_for
from tests.polling import eventually
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.core.events import InputAccepted, TurnEnded

pytestmark = pytest.mark.integration
SECRET = "webhook-secret_0123456789"
REPLY = "hello over the webhook"


async def test_a_real_update_is_taken_once_and_a_forged_one_is_refused(
    nats_server: EmbeddedServer, bus: Bus, fake: FakeTelegram, tmp_path: Path
) -> None:
    (tmp_path / "script.yaml").write_text(f'replies:\n  - text: "{REPLY}"\n')
    settings = settings_for(nats_server, tmp_path, script=tmp_path / "script.yaml")
    port = free_port()
    url = f"http://127.0.0.1:{port}/tg/hook"
    async with running_services(settings):
        with channel_process(
            nats_server,
            fake,
            tmp_path,
            TURNSTREAM_TELEGRAM__DM_POLICY="open",
            TURNSTREAM_TELEGRAM_WEBHOOK_URL=url,
            TURNSTREAM_TELEGRAM_WEBHOOK_SECRET=SECRET,
            TURNSTREAM_TELEGRAM_WEBHOOK_ADDR=f"127.0.0.1:{port}",
        ) as channel:
            (hooked,) = await eventually(lambda: fake.of("setWebhook"))
            assert hooked.params["url"] == url and hooked.params["secret_token"] == SECRET
            await until(lambda: listening(port))
            forged = {"update_id": next(fake.update_ids), **fake.message_update("x", chat_id=77)}
            assert await post_update(url, forged, None) == 401
            assert await post_update(url, forged, "wrong-secret") == 401
            assert await post_update(url, forged, SECRET[:-1]) == 401
            real = {"update_id": next(fake.update_ids), **fake.message_update("hi", chat_id=42)}
            assert await post_update(url, real, SECRET) == 200  # answered once stored
            assert await post_update(url, real, SECRET) == 200  # Telegram sends it again
            await eventually(lambda: [m for m in fake.sent(42) if m.text == REPLY])
            assert channel.stop() == 0
    events = await events_of(bus, "telegram-42")
    assert len([e for e in events if isinstance(e, InputAccepted)]) == 1, "one turn"
    assert len([e for e in events if isinstance(e, TurnEnded)]) == 1
    assert await events_of(bus, "telegram-77") == [], "a forged update is never a turn"
    assert not fake.of("getUpdates"), "no polling beside the webhook"
    assert [m.text for m in fake.sent(42)] == [REPLY]
    assert SECRET not in channel.output() and fake.token not in channel.output()
