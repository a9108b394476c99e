"""The Slack channel with real services and a real nats-server, Slack played by the fake
(`tests.channels.fake_slack`) behind the official SDKs; the channel in-process here, over
HTTP in `test_slack_http`, as a killed and restarted process in `test_slack_kill`."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("slack_bolt")

from tests.channels.slack_harness import (
    REPLY,
    SCRIPT,
    TOOL_SCRIPT,
    channel_up,
    cli,
    ended,
    session_of,
    until,
)
from tests.integration.conftest import events_of
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.channels.slack_mrkdwn import to_mrkdwn
from turnstream.core.events import (
    InputAccepted,
    InteractionAnswered,
    ToolInvocationSucceeded,
    TurnEnded,
)

pytestmark = pytest.mark.integration


async def test_dm_streams_natively_then_one_final_message(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with channel_up(nats_server, bus, tmp_path, monkeypatch) as (fake, _):
        _event, root = await fake.user_says("D0DM", "U0ALICE", "hi there")
        events = await ended(bus, session_of("D0DM", root))
        await until(lambda: fake.calls_of("chat.stopStream"))
        [reply] = fake.bot_messages("D0DM")
        assert reply.thread_ts == root and not reply.streaming
        assert reply.text == REPLY
        assert reply.metadata is not None
        assert fake.calls_of("chat.startStream")[0].args["chunks"][0]["text"]
        assert len(fake.calls_of("chat.appendStream")) >= 1, "streamed in more than one go"
        assert not fake.calls_of("chat.postMessage"), "the stream is the reply"
        await until(lambda: fake.statuses[-1] == {**fake.statuses[-1], "status": ""})
        shown = [s["status"] for s in fake.statuses if s["thread_ts"] == root]
        assert shown[0] == "is working…" and shown[-1] == "", "working, then cleared"
        accepted = [e for e in events if isinstance(e, InputAccepted)]
        assert len(accepted) == 1


async def test_channel_message_needs_a_mention_and_redelivery_is_one_turn(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = {"groups": ["C0TEAM"]}
    async with channel_up(nats_server, bus, tmp_path, monkeypatch, slack=policy) as (fake, _):
        plain_event, plain = await fake.user_says("C0TEAM", "U0ALICE", "just chatting")
        await fake.socket.wait_acked_event(plain_event)
        _event, asked = await fake.user_says("C0TEAM", "U0ALICE", "<@U0BOT> hello")
        # Slack sends a mention twice (message, app_mention), and re-sends an event
        mention = fake.message_event(fake.find("C0TEAM", asked)) | {"type": "app_mention"}
        await fake.socket.deliver_event(mention)
        again = fake.socket.sent[-1].payload
        await fake.socket.deliver("events_api", again)
        await ended(bus, session_of("C0TEAM", asked))
        await until(lambda: fake.calls_of("chat.stopStream"))
        await asyncio.sleep(1.0)
        assert await events_of(bus, session_of("C0TEAM", plain)) == []
        accepted = [
            e
            for e in await events_of(bus, session_of("C0TEAM", asked))
            if isinstance(e, InputAccepted)
        ]
        assert len(accepted) == 1
        [reply] = fake.bot_messages("C0TEAM")
        assert reply.text == REPLY
        start = fake.calls_of("chat.startStream")[0].args
        assert (start["recipient_user_id"], start["recipient_team_id"]) == ("U0ALICE", "T0FAKE")


async def test_button_press_runs_the_tool_once_and_another_users_is_refused(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with channel_up(
        nats_server, bus, tmp_path, monkeypatch, script=TOOL_SCRIPT, security_mode="ask"
    ) as (fake, _):
        _event, root = await fake.user_says("D0DM", "U0ALICE", "write a note")
        session = session_of("D0DM", root)

        def prompt() -> Any:
            found = [m for m in fake.bot_messages("D0DM") if m.blocks and len(m.blocks) > 1]
            return found[0] if found else None

        await until(prompt)
        asked = prompt()
        action = asked.blocks[1]["elements"][0]
        assert action["action_id"] == "turnstream:approve"
        await fake.press("U0BOB", "D0DM", asked.ts, "turnstream:approve", action["value"])
        await until(lambda: fake.ephemeral)
        assert fake.ephemeral[0]["user"] == "U0BOB"
        await fake.press("U0ALICE", "D0DM", asked.ts, "turnstream:approve", action["value"])
        await fake.press("U0ALICE", "D0DM", asked.ts, "turnstream:approve", action["value"])
        events = await ended(bus, session)
        await asyncio.sleep(0.5)
        events = await events_of(bus, session)
        assert len([e for e in events if isinstance(e, ToolInvocationSucceeded)]) == 1
        assert len([e for e in events if isinstance(e, InteractionAnswered)]) == 1
        assert (tmp_path / "workspace" / "note.txt").read_text() == "hi"
        await until(lambda: len(asked.blocks) == 1)
        assert "Approved by U0ALICE" in asked.text
        assert [e["user"] for e in fake.ephemeral] == ["U0BOB"]


async def test_rate_limited_post_arrives_once_after_the_wait(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with channel_up(nats_server, bus, tmp_path, monkeypatch) as (fake, _):
        fake.rate_limit("chat.startStream", retry_after=1)
        fake.rate_limit("chat.stopStream", retry_after=1)
        began = time.monotonic()
        _event, root = await fake.user_says("D0DM", "U0ALICE", "hi")
        await ended(bus, session_of("D0DM", root))
        await until(lambda: fake.calls_of("chat.stopStream"))
        assert time.monotonic() - began >= 2
        assert [c.status for c in fake.calls if c.method == "chat.startStream"] == [429, 200]
        [reply] = fake.bot_messages("D0DM")
        assert reply.text == REPLY and not reply.streaming
        # where Slack refuses a stream: the post that streams by edits, rate limited
        fake.fail("chat.startStream", "feature_not_enabled")
        fake.rate_limit("chat.postMessage", retry_after=1)
        _event, root = await fake.user_says("D0EDIT", "U0ALICE", "hi")
        await ended(bus, session_of("D0EDIT", root))
        await until(lambda: [m.text for m in fake.bot_messages("D0EDIT")] == [to_mrkdwn(REPLY)])
        assert [c.status for c in fake.calls if c.method == "chat.postMessage"] == [429, 200]


async def test_a_stranger_gets_a_pairing_code_and_once_approved_a_reply(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = {"dm_policy": "pairing"}
    async with channel_up(nats_server, bus, tmp_path, monkeypatch, slack=policy) as (fake, _):
        _event, first = await fake.user_says("D0NEW", "U0STRANGER", "hi")
        await until(lambda: fake.bot_messages("D0NEW"))
        told = fake.bot_messages("D0NEW")[0]
        found = re.search(r"pairing code is ([A-Z2-9]{8})", told.text)
        assert found is not None and told.thread_ts == first
        assert await events_of(bus, session_of("D0NEW", first)) == [], "a refusal is no turn"
        done, said = await cli(nats_server, "approve", found.group(1))
        assert done == 0 and "approved" in said, said
        _event, second = await fake.user_says("D0NEW", "U0STRANGER", "hi again")
        await ended(bus, session_of("D0NEW", second))
        await until(lambda: any(m.text == REPLY for m in fake.bot_messages("D0NEW")))


async def test_a_dropped_socket_mode_connection_is_reconnected(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with channel_up(nats_server, bus, tmp_path, monkeypatch) as (fake, _):
        await fake.socket.drop()
        await until(lambda: fake.socket.connects == 2 and fake.socket.connections)
        _event, root = await fake.user_says("D0DROP", "U0ALICE", "still there?")
        await ended(bus, session_of("D0DROP", root))
        await until(lambda: any(m.text == REPLY for m in fake.bot_messages("D0DROP")))
        assert len(fake.calls_of("apps.connections.open")) == 2


async def test_a_stop_press_on_a_reply_streamed_by_edits_stops_the_turn(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = SCRIPT.replace("delay_ms: 60", "delay_ms: 400")
    async with channel_up(nats_server, bus, tmp_path, monkeypatch, script=slow) as (fake, _):
        fake.fail("chat.startStream", "feature_not_enabled")  # streams by edits, with a stop
        _event, root = await fake.user_says("D0STOP", "U0ALICE", "go on and on")

        def streamed() -> Any:
            found = [m for m in fake.bot_messages("D0STOP") if m.blocks and len(m.blocks) > 1]
            return found[0] if found else None

        await until(streamed)
        message = streamed()
        stop = message.blocks[1]["elements"][0]
        assert stop["action_id"] == "turnstream:stop"
        await fake.press("U0BOB", "D0STOP", message.ts, "turnstream:stop", stop["value"])
        await until(lambda: fake.ephemeral)
        await fake.press("U0ALICE", "D0STOP", message.ts, "turnstream:stop", stop["value"])
        events = await ended(bus, session_of("D0STOP", root))
        [turn_end] = [e for e in events if isinstance(e, TurnEnded)]
        assert turn_end.data.failure_class == "interrupted"
        await until(lambda: "Stopped" in message.text and len(message.blocks or []) <= 1)
        assert len(fake.bot_messages("D0STOP")) == 1
        assert message.text != to_mrkdwn(REPLY), "stopped before the whole reply"


async def test_bang_stop_in_the_thread_interrupts_the_turn(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = SCRIPT.replace("delay_ms: 60", "delay_ms: 400")
    async with channel_up(nats_server, bus, tmp_path, monkeypatch, script=slow) as (fake, _):
        _event, root = await fake.user_says("D0BANG", "U0ALICE", "go on and on")
        await until(lambda: fake.calls_of("chat.startStream"))
        await fake.user_says("D0BANG", "U0ALICE", "!stop", thread_ts=root)
        events = await ended(bus, session_of("D0BANG", root))
        [turn_end] = [e for e in events if isinstance(e, TurnEnded)]
        assert turn_end.data.failure_class == "interrupted"
        await until(lambda: fake.calls_of("chat.stopStream"))
        [reply] = fake.bot_messages("D0BANG")
        assert reply.text.endswith("⏹ Stopped.") and not reply.streaming


async def test_a_failed_stream_start_is_not_mistaken_for_another_post_in_the_thread(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = {"dm_policy": "pairing"}
    async with channel_up(nats_server, bus, tmp_path, monkeypatch, slack=policy) as (fake, _):
        _event, first = await fake.user_says("D0PAIR", "U0NEWCOMER", "hi")
        await until(lambda: fake.bot_messages("D0PAIR"))
        [told] = fake.bot_messages("D0PAIR")
        found = re.search(r"pairing code is ([A-Z2-9]{8})", told.text)
        assert found is not None
        done, said = await cli(nats_server, "approve", found.group(1))
        assert done == 0, said
        # Slack in trouble at the stream's start: the intent stays, the bot's one other
        # message in the thread (the pairing reply, tagged) is not taken for the stream
        fake.fail("chat.startStream", "internal_error", status=500)
        await fake.user_says("D0PAIR", "U0NEWCOMER", "hi again", thread_ts=first)
        await ended(bus, session_of("D0PAIR", first))
        await until(lambda: len(fake.bot_messages("D0PAIR")) == 2)
        await asyncio.sleep(1.0)
        pairing, reply = fake.bot_messages("D0PAIR")
        assert pairing is told and told.edits == 0 and not told.streaming
        assert reply.text in (REPLY, to_mrkdwn(REPLY)) and not reply.streaming
        assert next(c.status for c in fake.calls if c.method == "chat.startStream") == 500
