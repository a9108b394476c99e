"""Slack's payloads as the channel core's values, and Markdown as mrkdwn (pure)."""

from __future__ import annotations

from turnstream.channels.platform import Button
from turnstream.channels.slack_mrkdwn import to_mrkdwn
from turnstream.channels.slack_posting import body_and_status
from turnstream.channels.slack_wire import Me, blocks, incoming, metadata, posted_with, press

ME = Me("U0BOT", "B0BOT", "T0FAKE")


def event(**fields: object) -> dict[str, object]:
    base: dict[str, object] = {
        "type": "message",
        "channel": "C0TEAM",
        "channel_type": "channel",
        "user": "U0ALICE",
        "text": "hello",
        "ts": "1700000001.000100",
        "client_msg_id": "cm-1",
    }
    return base | fields


def test_a_mention_comes_twice_and_is_one_key() -> None:
    text = "<@U0BOT> what is up"
    as_message = incoming(event(text=text), "Ev1", ME)
    as_mention = incoming(event(type="app_mention", text=text), "Ev2", ME)
    assert as_message is not None and as_mention is not None
    assert as_message.key == as_mention.key == "slack-T0FAKE-cm-1"
    assert as_message.mentions_bot and as_mention.mentions_bot
    assert as_message.text == "what is up"
    assert not as_message.chat.private and as_message.chat.thread == "1700000001.000100"


def test_thread_dm_bots_and_edits() -> None:
    reply = incoming(event(thread_ts="1700000000.000001"), "Ev1", ME)
    assert reply is not None and reply.chat.thread == "1700000000.000001"
    dm = incoming(event(channel="D0DM", channel_type="im"), "Ev1", ME)
    assert dm is not None and dm.chat.private and not dm.mentions_bot
    own = incoming(event(bot_id="B0BOT", user="U0BOT", subtype="bot_message"), "Ev3", ME)
    assert own is not None and own.from_self and own.from_bot and own.key == "slack-T0FAKE-cm-1"
    other = incoming(event(bot_id="B0OTHER", user=None, client_msg_id=None), "Ev4", ME)
    assert other is not None and other.from_bot and not other.from_self
    assert other.key == "slack-T0FAKE-Ev4"
    assert incoming(event(subtype="message_changed"), "Ev5", ME) is None
    assert incoming({"type": "reaction_added"}, "Ev6", ME) is None
    command = incoming(event(text="<@U0BOT> !new please"), "Ev7", ME)
    assert command is not None and command.text == "/new please"


def test_a_press_of_our_buttons_only() -> None:
    body = {
        "type": "block_actions",
        "user": {"id": "U0BOB", "username": "bob"},
        "container": {"channel_id": "D0DM", "message_ts": "17.2", "thread_ts": "17.1"},
        "actions": [{"action_id": "turnstream:deny", "value": "i-1", "action_ts": "18.0"}],
    }
    found = press(body)
    assert found is not None
    assert (found.decision, found.interaction_id, found.user) == ("deny", "i-1", "U0BOB")
    assert found.chat.id == "D0DM" and found.chat.private and found.chat.thread == "17.1"
    assert found.ref == "D0DM|U0BOB|17.1"
    other = {**body, "actions": [{"action_id": "someone_else", "value": "x"}]}
    assert press(other) is None
    stop = {**body, "actions": [{"action_id": "turnstream:stop", "value": "t-1"}]}
    stopped = press(stop)
    assert stopped is not None and (stopped.decision, stopped.interaction_id) == ("stop", "t-1")
    [button] = blocks("so far", [Button("Stop", "t-1", "stop")])[1]["elements"]
    assert button["action_id"] == "turnstream:stop" and "style" not in button


def test_prompt_blocks_and_metadata_found_again() -> None:
    shown = blocks(
        "Run **it**?", [Button("Approve", "i-1", "approve"), Button("Deny", "i-1", "deny")]
    )
    assert shown[0]["text"]["text"] == "Run *it*?"
    ids = [e["action_id"] for e in shown[1]["elements"]]
    assert ids == ["turnstream:approve", "turnstream:deny"]
    thread = [
        {"ts": "1.0", "user": "U0ALICE"},
        {"ts": "2.0", "bot_id": "B0BOT", "metadata": metadata("turn:t1:0")},
        {"ts": "3.0", "bot_id": "B0OTHER", "metadata": metadata("turn:t1:1")},
    ]
    assert posted_with(thread, "turn:t1:0", "B0BOT") == "2.0"
    assert posted_with(thread, "turn:t1:1", "B0BOT") is None


def test_mrkdwn() -> None:
    assert to_mrkdwn("# Title\n**bold**, *it*, ~~no~~") == "*Title*\n*bold*, _it_, ~no~"
    assert to_mrkdwn("a < b & [docs](https://x.io/a_b)") == "a &lt; b &amp; <https://x.io/a_b|docs>"
    assert to_mrkdwn("`**raw**` ```\n*x* <y>\n```") == "`**raw**` ```\n*x* &lt;y&gt;\n```"
    assert to_mrkdwn("- one\n* two\n2 * 3 * 4") == "• one\n• two\n2 * 3 * 4"


def test_status_line_is_split_from_the_streamed_body() -> None:
    assert body_and_status("Hello\n\n🔧 read_file path=a") == ("Hello", "🔧 read_file path=a")
    assert body_and_status("🔧 read_file") == ("", "🔧 read_file")
    assert body_and_status("Hello\n\nworld") == ("Hello\n\nworld", None)
