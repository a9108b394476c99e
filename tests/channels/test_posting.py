"""Exactly-once posting (`channels.posting`) over the channel's real KV bucket, with an
in-test platform that keeps its messages in a list: each row of the posting record's table,
the window closed where the platform can find a message again (`FindsPosts`, as Slack's
metadata lets it) and left open where it cannot (Telegram), 429s and failures."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import uuid_utils

from tests.integration.conftest import bus, log_partitions, nats_server
from turnstream.bus import Bus
from turnstream.channels.platform import (
    Button,
    Chat,
    Delivery,
    Limits,
    PlatformError,
    Press,
    RateLimited,
)
from turnstream.channels.posting import Poster, notice_name
from turnstream.channels.records import POSTED_TTL_S, Records

__all__ = ["bus", "log_partitions", "nats_server"]
pytestmark = pytest.mark.integration
CHAT = Chat("1", private=False)


@dataclass
class Message:
    text: str
    tag: str | None = None
    buttons: Sequence[Button] = ()


@dataclass
class ListPlatform:
    """A platform whose chat is a list; `refusals` are raised by the next posts."""

    name: str = "telegram"
    limits: Limits = field(default_factory=lambda: Limits(text=100, default_scope="chat"))
    messages: list[Message] = field(default_factory=list)
    refusals: list[Exception] = field(default_factory=list)
    calls: int = 0

    async def receive(self) -> AsyncIterator[Delivery]:  # not used: posting only
        nothing: tuple[Delivery, ...] = ()
        for delivery in nothing:
            yield delivery

    async def typing(self, chat: Chat) -> None:
        return None

    async def draft(self, chat: Chat, draft_id: int, text: str) -> bool:
        return False

    async def post(self, chat: Chat, text: str, buttons: Sequence[Button] = ()) -> str:
        return await self._post(text, None, buttons)

    async def _post(self, text: str, tag: str | None, buttons: Sequence[Button]) -> str:
        self.calls += 1
        if self.refusals:
            raise self.refusals.pop(0)
        self.messages.append(Message(text, tag, buttons))
        return str(len(self.messages) - 1)

    async def edit(self, chat: Chat, ref: str, text: str, buttons: Sequence[Button] = ()) -> None:
        self.messages[int(ref)].text = text

    async def answer_press(self, press: Press, text: str, *, alert: bool) -> None:
        return None

    async def aclose(self) -> None:
        return None


@dataclass
class FindingPlatform(ListPlatform):
    """One that finds a message by its tag again (as Slack's metadata does)."""

    async def post_tagged(
        self, chat: Chat, text: str, tag: str, buttons: Sequence[Button] = ()
    ) -> str:
        return await self._post(text, tag, buttons)

    async def find_tagged(self, chat: Chat, tag: str) -> str | None:
        return next((str(i) for i, m in enumerate(self.messages) if m.tag == tag), None)


async def records(bus: Bus) -> Records:
    return await Records.open(bus, "telegram")


def turn() -> str:
    return str(uuid_utils.uuid7())


async def test_nothing_recorded_posts_and_a_reference_recorded_edits(bus: Bus) -> None:
    platform, t = ListPlatform(), turn()
    poster = Poster(platform, await records(bus))
    await poster.stream(t, CHAT, "Hel")
    await poster.stream(t, CHAT, "Hello")
    await poster.final(t, CHAT, ["Hello world", "second part"])
    await poster.final(t, CHAT, ["Hello world", "second part"])  # redelivered: done
    assert [m.text for m in platform.messages] == ["Hello world", "second part"]
    assert platform.calls == 2


@pytest.mark.parametrize("finds", [True, False])
async def test_the_window_is_closed_where_the_platform_finds_the_post(
    bus: Bus, finds: bool
) -> None:
    """Killed after the platform took the post and before the reference was recorded: the
    record has the intent, the platform has the message. A platform that can find it again
    edits it; one that cannot posts again (Telegram: docs/channels.md)."""
    platform = FindingPlatform() if finds else ListPlatform()
    found, t = await records(bus), turn()
    platform.messages.append(Message("Hel", f"{t}:0" if finds else None))
    await found.put_turn(t, {"parts": [{"ref": None}]})  # the intent, left by the dead one
    await Poster(platform, found).final(t, CHAT, ["Hello"])
    texts = [m.text for m in platform.messages]
    assert texts == (["Hello"] if finds else ["Hel", "Hello"])
    assert (await found.turn(t) or {}).get("done")


async def test_a_live_token_streamed_while_the_turn_is_tracked_keeps_its_sender(
    bus: Bus,
) -> None:
    """Live tokens do not wait for the log: the first one's `stream` may read the turn's
    record before `track` has written it, and write it back after. The sender (who may
    answer the turn's prompts) must survive that; once it was written over, and the
    asker's own press was refused."""
    opened = await records(bus)
    read, created = asyncio.Event(), asyncio.Event()

    class Racing(Records):
        async def turn(self, turn_id: str) -> dict[str, Any] | None:
            found = await super().turn(turn_id)
            read.set()
            if not created.is_set():  # the stream's read: let the track's write come between
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(created.wait(), 0.5)
            return found

        async def create_turn(self, turn_id: str, value: dict[str, Any]) -> bool:
            made = await super().create_turn(turn_id, value)
            created.set()
            return made

    platform, found, t = ListPlatform(), Racing(opened.kv, opened.bus, opened.bucket), turn()
    poster = Poster(platform, found)
    streamed = asyncio.ensure_future(poster.stream(t, CHAT, "Hel"))
    await read.wait()  # the stream has read the record first, as a token can
    await poster.track(t, "s", CHAT, "alice")
    await streamed
    record = await found.turn(t) or {}
    assert record.get("sender") == "alice" and record["parts"][0]["ref"] == "0"


async def test_a_prompt_in_the_window_is_found_again_not_posted_twice(bus: Bus) -> None:
    platform, found = FindingPlatform(), await records(bus)
    interaction = str(uuid_utils.uuid7())
    buttons = (Button("ok", interaction, "approve"),)
    platform.messages.append(Message("Approve?", f"prompt:{interaction}", buttons))
    await found.put_prompt(interaction, {"session": "s", "sender": "7", "ref": None})
    await Poster(platform, found).prompt(turn(), "s", CHAT, interaction, "Approve?", buttons)
    assert len(platform.messages) == 1
    assert (await found.prompt(interaction) or {}).get("ref") == "0"


async def test_429s_and_network_failures_are_waited_out_a_refusal_is_not(bus: Bus) -> None:
    platform = ListPlatform()
    platform.refusals = [
        RateLimited(0.2),
        PlatformError("sendMessage", "NetworkError", "Bad Gateway", transient=True),
    ]
    poster, t = Poster(platform, await records(bus)), turn()
    await poster.final(t, CHAT, ["once"])
    assert [m.text for m in platform.messages] == ["once"] and platform.calls == 3
    platform.refusals = [PlatformError("sendMessage", "Forbidden", "bot was blocked")]
    with pytest.raises(PlatformError):
        await poster.final(turn(), CHAT, ["never"])
    assert len(platform.messages) == 1


async def test_a_turns_record_expires_and_a_create_is_once(bus: Bus) -> None:
    """Posting records carry a per-key TTL (the bucket does not grow for ever); the turn's
    record is made once, a second `create` leaves it as it was."""
    found, t = await records(bus), turn()
    assert await found.create_turn(t, {"sender": "7", "parts": []})
    assert not await found.create_turn(t, {"sender": "8", "parts": []})
    assert (await found.turn(t) or {}).get("sender") == "7"
    stored = await bus.js.get_last_msg(
        "KV_ts_channel_telegram", f"$KV.ts_channel_telegram.turn.{t}"
    )
    assert stored.headers["Nats-TTL"] == f"{POSTED_TTL_S}s"


async def test_a_notice_is_posted_once_per_message_and_found_again_in_the_window(
    bus: Bus,
) -> None:
    platform, found = FindingPlatform(), await records(bus)
    key = f"tg-{turn()}"
    poster = Poster(platform, found)
    await poster.notice(key, CHAT, "Your pairing code is X")
    await poster.notice(key, CHAT, "Your pairing code is X")  # the message re-delivered
    assert [m.text for m in platform.messages] == ["Your pairing code is X"]
    # killed after the platform took it, before its reference was recorded: found again
    other = f"tg-{turn()}"
    name = notice_name(other)
    platform.messages.append(Message("refused", f"notice:{name}"))
    await found.put_notice(name, {"ref": None})
    await poster.notice(other, CHAT, "refused")
    assert len(platform.messages) == 2 and (await found.notice(name) or {})["ref"] == "1"
