"""The Telegram module's own work, without a network: updates read into the core's values
(keys, chats, topics, mentions, `/stop@bot`, button presses) and Markdown into HTML."""

from __future__ import annotations

from typing import Any

import pytest
from telegram import Update

from turnstream.channels.platform import Chat, Incoming, Press
from turnstream.channels.telegram import Telegram
from turnstream.channels.telegram_html import to_html

BOT_ID = 999


def telegram() -> Telegram:
    platform = Telegram("1:abc", "http://127.0.0.1:1")
    platform.me_id, platform.me_name = BOT_ID, "ts_test_bot"
    return platform


def update(platform: Telegram, **fields: Any) -> Update:
    return Update.de_json({"update_id": 5, **fields}, platform.bot)


def message(text: str, chat: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        "message_id": 9,
        "date": 0,
        "chat": chat,
        "from": {"id": 7, "is_bot": False, "first_name": "Ann", "last_name": "Lee"},
        "text": text,
        **more,
    }


PRIVATE = {"id": 7, "type": "private", "first_name": "Ann"}
GROUP = {"id": -100, "type": "supergroup", "title": "G", "is_forum": True}


def test_a_private_message_is_keyed_by_chat_update_and_message() -> None:
    platform = telegram()
    got = platform.parse(update(platform, message=message("hi", PRIVATE)))
    assert got == Incoming("tg-7-5-9", Chat("7", True), "7", "Ann Lee", "hi")


def test_a_group_mention_a_reply_to_the_bot_and_a_command_for_it() -> None:
    platform = telegram()
    mention = [{"type": "mention", "offset": 0, "length": 12}]
    got = platform.parse(
        update(platform, message=message("@TS_test_bot go", GROUP, entities=mention))
    )
    assert isinstance(got, Incoming) and got.mentions_bot and not got.chat.private
    other = [{"type": "mention", "offset": 0, "length": 6}]
    got = platform.parse(update(platform, message=message("@other go", GROUP, entities=other)))
    assert isinstance(got, Incoming) and not got.mentions_bot
    bot_msg = {
        "message_id": 1,
        "date": 0,
        "chat": GROUP,
        "text": "x",
        "from": {"id": BOT_ID, "is_bot": True, "first_name": "B"},
    }
    got = platform.parse(update(platform, message=message("and?", GROUP, reply_to_message=bot_msg)))
    assert isinstance(got, Incoming) and got.mentions_bot
    command = [{"type": "bot_command", "offset": 0, "length": 17}]
    got = platform.parse(
        update(platform, message=message("/stop@ts_test_bot", GROUP, entities=command))
    )
    assert isinstance(got, Incoming) and got.text == "/stop" and got.mentions_bot


def test_a_forum_topic_is_its_own_chat_and_the_bots_own_message_is_marked() -> None:
    platform = telegram()
    topic = message("hi", GROUP, message_thread_id=5, is_topic_message=True)
    got = platform.parse(update(platform, message=topic))
    assert isinstance(got, Incoming) and got.chat == Chat("-100", False, topic="5")
    own = message("echo", GROUP)
    own["from"] = {"id": BOT_ID, "is_bot": True, "first_name": "B"}
    got = platform.parse(update(platform, message=own))
    assert isinstance(got, Incoming) and got.from_self and got.from_bot


def test_a_button_press_and_what_is_not_one() -> None:
    platform = telegram()
    query = {
        "id": "q1",
        "from": {"id": 8, "is_bot": False, "first_name": "Bob"},
        "chat_instance": "c",
        "data": "d:0192-iid",
        "message": message("prompt", PRIVATE),
    }
    got = platform.parse(update(platform, callback_query=query))
    assert got == Press("tg-5-q1", Chat("7", True), "8", "Bob", "0192-iid", "deny", "q1")
    assert platform.parse(update(platform, callback_query={**query, "data": "zz"})) is None
    assert platform.parse(update(platform, edited_message=message("x", PRIVATE))) is None


def test_markdown_becomes_telegram_html() -> None:
    html = to_html("**bold** _it_ `a<b` [x](https://e.x/?a=1&b=2)\n```py\nif a < b:\n```")
    assert html == (
        '<b>bold</b> <i>it</i> <code>a&lt;b</code> <a href="https://e.x/?a=1&amp;b=2">x</a>\n'
        '<pre><code class="language-py">if a &lt; b:</code></pre>'
    )
    assert to_html("snake_case_name 2 * 3 * 4 <tag>") == "snake_case_name 2 * 3 * 4 &lt;tag&gt;"


def test_webhook_mode_needs_a_secret_telegram_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    from turnstream.channels.telegram import webhook_of
    from turnstream.settings import Settings

    monkeypatch.delenv("TURNSTREAM_TELEGRAM_WEBHOOK_SECRET", raising=False)
    assert webhook_of(Settings()) is None, "long polling unless a URL is set"
    hooked = Settings(telegram_webhook_url="https://bot.example.com/tg/hook")
    with pytest.raises(ValueError, match="TURNSTREAM_TELEGRAM_WEBHOOK_SECRET"):
        webhook_of(hooked)
    monkeypatch.setenv("TURNSTREAM_TELEGRAM_WEBHOOK_SECRET", "bad secret!")
    with pytest.raises(ValueError, match="1-256 characters"):
        webhook_of(hooked)
    monkeypatch.setenv("TURNSTREAM_TELEGRAM_WEBHOOK_SECRET", "s3cret_-x")
    hook = webhook_of(hooked)
    assert hook is not None and hook.path == "/tg/hook" and hook.listen == ("127.0.0.1", 8443)
    assert "s3cret_-x" in hooked.secret_values(), "redacted like the token"
