"""SIGKILL of the Telegram channel at each point of the posting sequence it can be caught
at, then a restart: the reply completes in the message already posted and nothing is
posted twice, but for the one window Telegram cannot close (killed after Telegram accepted
a post and before the channel recorded it), where the post comes twice and says so."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.channels.conftest import channel_process, wait_polling
from tests.channels.fake_telegram import FakeTelegram
from tests.integration.conftest import events_of, running_services, settings_for
from tests.polling import eventually
from turnstream.bus import Bus, connect
from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.streams import StreamLimits
from turnstream.core.events import TurnEnded

pytestmark = pytest.mark.integration
WORDS = " ".join(f"word{i}" for i in range(30))
SCRIPT = f"""
replies:
  - text: "{WORDS}"
    delay_ms: 100
"""
GROUP = {"chat_type": "group", "user_id": 11}
MENTION = [{"type": "mention", "offset": 0, "length": len("@ts_test_bot")}]
WINDOW = "before its reference was recorded"


def settings(server: EmbeddedServer, tmp: Path) -> object:
    (tmp / "script.yaml").write_text(SCRIPT)
    return settings_for(server, tmp, script=tmp / "script.yaml")


async def kill_and_restart(
    server: EmbeddedServer, fake: FakeTelegram, tmp: Path, chat_id: int, at: str
) -> str:
    """A group message whose reply streams by edits; the channel SIGKILLed `at` a point,
    restarted; the channel's output once the reply is complete."""
    env = {"TURNSTREAM_TELEGRAM__GROUPS": f'["{chat_id}"]'}
    with channel_process(server, fake, tmp, **env) as channel:
        await wait_polling(fake)
        if at == "mid-stream":  # its first message posted and recorded: it has been edited
            await fake.say("@ts_test_bot go", chat_id=chat_id, entities=MENTION, **GROUP)
            await eventually(lambda: [m for m in fake.sent(chat_id) if m.edits])
            channel.kill()
        else:
            method, when = at.split(":")
            hold = fake.hold(method, when, text=WORDS if method == "editMessageText" else None)
            await fake.say("@ts_test_bot go", chat_id=chat_id, entities=MENTION, **GROUP)
            await asyncio.wait_for(hold.reached.wait(), 20)
            channel.kill()
            hold.release.set()
        channel.start()
        await eventually(lambda: [m for m in fake.sent(chat_id) if m.text == WORDS], 40)
        await asyncio.sleep(1.0)  # anything more it would post, it posts now
        channel.stop()
        return channel.output()


@pytest.mark.parametrize(
    ("at", "chat_id"),
    [
        ("mid-stream", -201),
        ("sendMessage:before", -202),  # the first post asked for, not taken
        ("editMessageText:before", -203),  # the final edit asked for, not taken
        ("editMessageText:after", -204),  # the final edit taken, not acknowledged
    ],
)
async def test_killed_while_posting_completes_in_the_message_already_posted(
    nats_server: EmbeddedServer,
    bus: Bus,
    fake: FakeTelegram,
    tmp_path: Path,
    at: str,
    chat_id: int,
) -> None:
    async with running_services(settings(nats_server, tmp_path)):  # type: ignore[arg-type]
        output = await kill_and_restart(nats_server, fake, tmp_path, chat_id, at)
        sent = fake.sent(chat_id)
        assert [m.text for m in sent] == [WORDS], "one message, completed in place"
        assert WINDOW not in output or at == "sendMessage:before"
        events = await events_of(bus, f"telegram-{chat_id}")
        assert len([e for e in events if isinstance(e, TurnEnded)]) == 1


async def test_killed_after_telegram_took_the_post_and_before_the_record_posts_twice(
    nats_server: EmbeddedServer, bus: Bus, fake: FakeTelegram, tmp_path: Path
) -> None:
    """The one window: Telegram has the message, the channel never learned its id, and a
    bot cannot read a chat's history to find it. The restarted channel posts again (a
    reply is never lost) and logs that it did (docs/channels.md measures the window)."""
    async with running_services(settings(nats_server, tmp_path)):  # type: ignore[arg-type]
        output = await kill_and_restart(nats_server, fake, tmp_path, -205, "sendMessage:after")
        sent = fake.sent(-205)
        assert len(sent) == 2 and sent[-1].text == WORDS
        assert WINDOW in output


@pytest.mark.timeout(180)
async def test_nats_restarted_mid_stream_the_reply_completes_in_its_message(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    """The broker away for 3 s while a reply streams (its own server: the module's others
    are not disturbed): the channel and the services ride it out, and the reply completes
    in the one message already posted."""
    store = tmp_path / "nats"
    with EmbeddedServer(store, log_file=tmp_path / "server.log") as server:
        await (await connect(server.url, server.subjects, ensure=StreamLimits())).close()
        async with running_services(settings(server, tmp_path)):  # type: ignore[arg-type]
            env = {"TURNSTREAM_TELEGRAM__GROUPS": '["-206"]'}
            with channel_process(server, fake, tmp_path, **env) as channel:
                await wait_polling(fake)
                await fake.say("@ts_test_bot go", chat_id=-206, entities=MENTION, **GROUP)
                await eventually(lambda: [m for m in fake.sent(-206) if m.edits])
                server.stop()
                await asyncio.sleep(3)
                server.start()
                await eventually(lambda: [m for m in fake.sent(-206) if m.text == WORDS], 90)
                await asyncio.sleep(1.0)
                assert [m.text for m in fake.sent(-206)] == [WORDS]
                assert channel.process is not None and channel.process.poll() is None
