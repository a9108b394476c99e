"""`turnstream up` starts the Telegram channel when its token is set: a user's direct
message runs the demo turn (its `list_dir` asked about with buttons, in `ask` mode), the
press runs it, the reply comes; the channel's log is beside the services'."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.channels.conftest import TOKEN, wait_polling
from tests.channels.fake_telegram import FakeTelegram
from tests.e2e.processes import running_up
from tests.polling import eventually

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


async def test_up_runs_the_telegram_channel_when_its_token_is_set(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    with running_up(
        tmp_path,
        TURNSTREAM_TELEGRAM_BOT_TOKEN=TOKEN,
        TURNSTREAM_TELEGRAM_API_URL=fake.url,
        TURNSTREAM_TELEGRAM__DM_POLICY="open",
    ):
        await wait_polling(fake)
        await fake.say("hello up", chat_id=81, user_id=81)
        prompt = (await eventually(lambda: [m for m in fake.sent(81) if m.reply_markup], 30))[0]
        assert "list_dir" in prompt.text
        await fake.press(
            prompt, prompt.reply_markup["inline_keyboard"][0][0]["callback_data"], user_id=81
        )
        await eventually(lambda: [m for m in fake.sent(81) if 'You said: "hello up"' in m.text])
    log = (tmp_path / "data" / "channels.telegram.log").read_text()
    assert "following the log as channel-telegram" in log and TOKEN not in log
