"""The Telegram channel end to end: the channel process, the services, a real nats-server
and a fake Bot API that records every call (issue 37)."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import pytest

from tests.channels.conftest import TOKEN, channel_process, wait_polling
from tests.channels.fake_telegram import FakeTelegram
from tests.integration.conftest import events_of, running_services, settings_for
from tests.polling import eventually
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.core.events import InputAccepted, TurnEnded

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


async def test_a_group_message_needs_a_mention(
    nats_server: EmbeddedServer, bus: Bus, fake: FakeTelegram, tmp_path: Path
) -> None:
    settings = settings_for(nats_server, tmp_path, script=script(tmp_path))
    group = {"chat_id": -100, "chat_type": "group", "user_id": 11}
    # the first edit's HTML refused: that edit is made again as plain text
    fake.fail("editMessageText", 400, "Bad Request: can't parse entities: unsupported tag")
    async with running_services(settings):
        with channel_process(nats_server, fake, tmp_path, TURNSTREAM_TELEGRAM__GROUPS='["-100"]'):
            await wait_polling(fake)
            await fake.say("hello everyone", **group)
            await fake.say("@ts_test_bot hi", entities=[MENTION], **group)
            final = await eventually(lambda: [m for m in fake.sent(-100) if m.text == REPLY])
            events = await events_of(bus, "telegram--100")
            accepted = [e for e in events if isinstance(e, InputAccepted)]
            assert [e.data.text for e in accepted] == ["@ts_test_bot hi"]
            # streamed by editing the one message the stream posted; the final text an edit
            assert len(final) == 1 and len(fake.sent(-100)) == 1
            assert final[0].edits, "streamed by edits, then completed in place"
            assert not fake.of("sendMessageDraft"), "no drafts in a group"
            edits = fake.of("editMessageText")
            assert edits[0].answered == "error" and "parse_mode" not in edits[1].params


MENTION = {"type": "mention", "offset": 0, "length": len("@ts_test_bot")}
CODE = re.compile(r"pairing code is ([A-Z2-9]{8})")


async def cli(nats_server: EmbeddedServer, tmp: Path, *args: str) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTREAM_")}
    env.update(TURNSTREAM_NATS_URL=nats_server.url, TURNSTREAM_CONFIG=str(tmp / "absent.yaml"))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "turnstream.cli",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await process.communicate()
    return int(process.returncode or 0), out.decode()


async def test_a_stranger_gets_a_code_and_once_approved_a_reply(
    nats_server: EmbeddedServer, bus: Bus, fake: FakeTelegram, tmp_path: Path
) -> None:
    settings = settings_for(nats_server, tmp_path, script=script(tmp_path))
    async with running_services(settings):
        with channel_process(nats_server, fake, tmp_path):  # dm_policy: pairing (default)
            await wait_polling(fake)
            await fake.say("hi", chat_id=43, user_id=70)
            told = await eventually(lambda: [m for m in fake.sent(43) if CODE.search(m.text)])
            code = CODE.search(told[0].text).group(1)  # type: ignore[union-attr]
            await fake.say("hello?", chat_id=43, user_id=70)
            again = await eventually(lambda: len(fake.sent(43)) == 2 and fake.sent(43))
            assert code in again[1].text, "the open code again, not a new one"
            assert await events_of(bus, "telegram-43") == [], "a refusal is never a turn"
            code_of, listed = await cli(nats_server, tmp_path, "channels", "pairing", "list")
            assert code_of == 0 and code in listed and "70" in listed, listed
            done, said = await cli(nats_server, tmp_path, "channels", "pairing", "approve", code)
            assert done == 0 and "approved" in said, said
            again_code, _ = await cli(nats_server, tmp_path, "channels", "pairing", "approve", code)
            assert again_code == 1, "a code is used once"
            await fake.say("hi again", chat_id=43, user_id=70)
            await eventually(lambda: [m for m in fake.sent(43) if m.text == REPLY])


async def test_the_same_update_delivered_again_is_one_turn(
    nats_server: EmbeddedServer, bus: Bus, fake: FakeTelegram, tmp_path: Path
) -> None:
    settings = settings_for(nats_server, tmp_path, script=script(tmp_path))
    async with running_services(settings):
        with channel_process(nats_server, fake, tmp_path, TURNSTREAM_TELEGRAM__DM_POLICY="open"):
            await wait_polling(fake)
            update_id = await fake.say("hi", chat_id=44)
            await eventually(lambda: [m for m in fake.sent(44) if m.text == REPLY])
            await fake.redeliver(update_id)
            assert fake.confirmed <= update_id
            await eventually(lambda: fake.confirmed > update_id)  # taken and confirmed again
            await asyncio.sleep(1.0)
            events = await events_of(bus, "telegram-44")
            assert len([e for e in events if isinstance(e, InputAccepted)]) == 1
            assert len(fake.sent(44)) == 1


APPROVAL_SCRIPT = """
replies:
  - text: "writing a note"
    tool_calls: [{name: write_file, arguments: {path: note.txt, content: "hi"}}]
  - text: "done: {last_tool_result:60}"
"""


async def test_an_approval_press_runs_the_tool_once_and_another_users_is_refused(
    nats_server: EmbeddedServer, bus: Bus, fake: FakeTelegram, tmp_path: Path
) -> None:
    settings = settings_for(
        nats_server, tmp_path, script=script(tmp_path, APPROVAL_SCRIPT), security_mode="ask"
    )
    async with running_services(settings):
        with channel_process(nats_server, fake, tmp_path, TURNSTREAM_TELEGRAM__DM_POLICY="open"):
            await wait_polling(fake)
            await fake.say("write a note", chat_id=45, user_id=7)
            prompt = (await eventually(lambda: [m for m in fake.sent(45) if m.reply_markup]))[0]
            buttons = prompt.reply_markup["inline_keyboard"][0]
            assert [b["text"] for b in buttons] == ["✅ Approve", "❌ Deny"]
            approve = buttons[0]["callback_data"]
            await fake.press(prompt, approve, user_id=8)  # not the sender, not an approver
            refused = await eventually(lambda: fake.of("answerCallbackQuery"))
            assert str(refused[0].params["show_alert"]).lower() == "true"
            await asyncio.sleep(1.0)
            events = await events_of(bus, "telegram-45")
            assert not [e for e in events if e.type == "InteractionAnswered"]
            await fake.press(prompt, approve, user_id=7)
            await fake.press(prompt, approve, user_id=7)  # twice: one answer
            await eventually(lambda: [m for m in fake.sent(45) if "done: wrote" in m.text])
            events = await events_of(bus, "telegram-45")
            assert len([e for e in events if e.type == "InteractionAnswered"]) == 1
            assert len([e for e in events if e.type == "ToolInvocationSucceeded"]) == 1
            assert (tmp_path / "workspace" / "note.txt").read_text() == "hi"
            await eventually(lambda: prompt.edits)
            assert "Approved by 7" in prompt.text and not prompt.reply_markup, "buttons gone"


async def test_a_429_on_the_post_is_waited_out_and_delivered_once(
    nats_server: EmbeddedServer, bus: Bus, fake: FakeTelegram, tmp_path: Path
) -> None:
    settings = settings_for(nats_server, tmp_path, script=script(tmp_path))
    fake.rate_limit("sendMessage", retry_after=2)
    async with running_services(settings):
        with channel_process(nats_server, fake, tmp_path, TURNSTREAM_TELEGRAM__DM_POLICY="open"):
            await wait_polling(fake)
            await fake.say("hi", chat_id=46)
            await eventually(lambda: [m for m in fake.sent(46) if m.text == REPLY])
            await asyncio.sleep(0.5)
            posts = fake.of("sendMessage")
            assert [c.answered for c in posts] == ["429", "ok"]
            assert posts[1].at - posts[0].at >= 2.0, "the wait Telegram asked for"
            assert len(fake.sent(46)) == 1


async def test_the_token_is_in_no_log_line_and_no_event(
    nats_server: EmbeddedServer, bus: Bus, fake: FakeTelegram, tmp_path: Path
) -> None:
    settings = settings_for(nats_server, tmp_path, script=script(tmp_path))
    fake.poll_failures = 2  # long-poll errors: reconnected with backoff, logged
    fake.rate_limit("sendMessage", retry_after=1)
    async with running_services(settings):
        with channel_process(
            nats_server,
            fake,
            tmp_path,
            TURNSTREAM_TELEGRAM__DM_POLICY="open",
            TURNSTREAM_LOG_LEVEL="DEBUG",  # python-telegram-bot logs its URL at debug
        ) as channel:
            await wait_polling(fake, polls=3)
            await fake.say("hi", chat_id=47)
            await eventually(lambda: [m for m in fake.sent(47) if m.text == REPLY])
            channel.stop()
    output = channel.output()
    assert "getUpdates failed" in output and "rate limited" in output
    assert "[redacted]" in output, "the URL was logged, redacted"
    assert TOKEN not in output and TOKEN.split(":")[1] not in output
    stored = b"".join(
        s.event.model_dump_json().encode() for s in await bus.store.read_session("telegram-47")
    )
    assert stored and TOKEN.encode() not in stored
    assert fake.unauthorized == 0


async def test_a_chat_that_blocked_the_bot_is_logged_and_the_others_still_answered(
    nats_server: EmbeddedServer, bus: Bus, fake: FakeTelegram, tmp_path: Path
) -> None:
    settings = settings_for(nats_server, tmp_path, script=script(tmp_path))
    fake.fail("sendMessage", 403, "Forbidden: bot was blocked by the user")
    fake.fail("sendMessage", 502, "Bad Gateway")  # the next one: a transient failure
    async with running_services(settings):
        with channel_process(
            nats_server, fake, tmp_path, TURNSTREAM_TELEGRAM__DM_POLICY="open"
        ) as channel:
            await wait_polling(fake)
            await fake.say("hi", chat_id=48)
            await eventually(lambda: len(fake.of("sendMessage")) == 1)
            await fake.say("hi", chat_id=49)
            await eventually(lambda: [m for m in fake.sent(49) if m.text == REPLY])
            channel.stop()
    output = channel.output()
    assert "sendMessage failed: Forbidden" in output, output
    assert "sendMessage failed: NetworkError Bad Gateway; again in" in output, output
    assert fake.sent(48) == [] and len(fake.sent(49)) == 1
    assert TOKEN not in output


LONG = " ".join(f"w{i:05d}" for i in range(1500))  # 10,499 characters: three messages


async def test_a_long_reply_is_split_at_4096_and_new_starts_a_fresh_session(
    nats_server: EmbeddedServer, bus: Bus, fake: FakeTelegram, tmp_path: Path
) -> None:
    long_script = f'replies:\n  - text: "{LONG}"\n    chunks: whole\n'
    settings = settings_for(nats_server, tmp_path, script=script(tmp_path, long_script))
    async with running_services(settings):
        with channel_process(nats_server, fake, tmp_path, TURNSTREAM_TELEGRAM__DM_POLICY="open"):
            await wait_polling(fake)
            await fake.say("hi", chat_id=51)
            parts = await eventually(lambda: len(fake.sent(51)) >= 3 and fake.sent(51))
            await asyncio.sleep(0.5)
            assert len(fake.sent(51)) == 3 and all(len(p.text) <= 4096 for p in parts)
            assert " ".join(p.text for p in parts).split() == LONG.split()
            new = await fake.say("/new", chat_id=51)
            await eventually(lambda: [m for m in fake.sent(51) if "new conversation" in m.text])
            await fake.redeliver(new)  # the same `/new` again: counted once
            await eventually(lambda: fake.confirmed > new)
            await fake.say("and now?", chat_id=51)
            await eventually(lambda: len(fake.sent(51)) >= 7)
    told = [m for m in fake.sent(51) if "new conversation" in m.text]
    assert len(told) == 1, "the re-sent `/new` is not answered again"
    fresh = await events_of(bus, "telegram-51-g1")
    assert [e.data.text for e in fresh if isinstance(e, InputAccepted)] == ["and now?"]


SLOW = " ".join(f"slow{i}" for i in range(60))


async def test_the_stop_button_stops_the_turn_only_for_its_sender(
    nats_server: EmbeddedServer, bus: Bus, fake: FakeTelegram, tmp_path: Path
) -> None:
    slow_script = f'replies:\n  - text: "{SLOW}"\n    delay_ms: 100\n'
    settings = settings_for(nats_server, tmp_path, script=script(tmp_path, slow_script))
    group = {"chat_id": -110, "chat_type": "group", "user_id": 11}
    async with running_services(settings):
        with channel_process(nats_server, fake, tmp_path, TURNSTREAM_TELEGRAM__GROUPS='["*"]'):
            await wait_polling(fake)
            await fake.say("@ts_test_bot go on", entities=[MENTION], **group)
            streamed = (await eventually(lambda: [m for m in fake.sent(-110) if m.reply_markup]))[0]
            [stop] = streamed.reply_markup["inline_keyboard"][0]
            assert stop["text"] == "⏹ Stop"
            await fake.press(streamed, stop["callback_data"], user_id=12)  # not the sender
            await eventually(lambda: fake.of("answerCallbackQuery"))
            await fake.press(streamed, stop["callback_data"], user_id=11)
            ended = await eventually(
                lambda: streamed.text.endswith("⏹ Stopped.") and streamed, timeout=10
            )
            assert not ended.reply_markup and len(fake.sent(-110)) == 1
            assert not ended.text.startswith(SLOW), "stopped before the end"
    events = await events_of(bus, "telegram--110")
    [turn_ended] = [e for e in events if isinstance(e, TurnEnded)]
    assert turn_ended.data.failure_class == "interrupted"
    answers = fake.of("answerCallbackQuery")
    assert str(answers[0].params.get("show_alert")).lower() == "true"


async def test_a_chat_waiting_out_a_429_holds_up_no_other(
    nats_server: EmbeddedServer, bus: Bus, fake: FakeTelegram, tmp_path: Path
) -> None:
    settings = settings_for(nats_server, tmp_path, script=script(tmp_path))
    fake.rate_limit("sendMessage", retry_after=6)  # the first final reply: chat 52's
    async with running_services(settings):
        with channel_process(nats_server, fake, tmp_path, TURNSTREAM_TELEGRAM__DM_POLICY="open"):
            await wait_polling(fake)
            await fake.say("hi", chat_id=52)
            await eventually(lambda: fake.of("sendMessage"))
            await fake.say("hi", chat_id=53)
            [late] = await eventually(lambda: fake.sent(52), timeout=30)
            [other] = fake.sent(53)
            assert other.at < late.at, "chat 53 answered while chat 52 waited"
