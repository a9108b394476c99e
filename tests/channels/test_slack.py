"""The Slack channel with real services and a real nats-server, Slack played by the fake
(`tests.channels.fake_slack`) behind the official SDKs; the channel in-process here, as a
killed and restarted process in `test_slack_kill`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("slack_bolt")

from tests.channels.fake_slack import FakeSlack
from tests.channels.fake_slack_http import post
from tests.integration.conftest import events_of, running_services, settings_for
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.channels import service as channel_service
from turnstream.channels import slack as slack_channel
from turnstream.channels.slack_mrkdwn import to_mrkdwn
from turnstream.client import publish_command
from turnstream.core.events import (
    InputAccepted,
    InteractionAnswered,
    ToolInvocationSucceeded,
    TurnEnded,
)
from turnstream.settings import Settings

pytestmark = pytest.mark.integration

REPLY = "Hello from **turnstream**: " + " ".join(f"w{i}" for i in range(12))
SCRIPT = f"""
replies:
  - text: "{REPLY}"
    delay_ms: 60
"""
TOOL_SCRIPT = """
replies:
  - text: "writing a note"
    tool_calls: [{name: write_file, arguments: {path: note.txt, content: "hi"}}]
  - text: "done: {last_tool_result:40}"
"""


@contextlib.asynccontextmanager
async def channel_up(
    server: EmbeddedServer,
    bus: Bus,
    tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    script: str = SCRIPT,
    http: bool = False,
    **overrides: Any,
) -> AsyncIterator[tuple[FakeSlack, Settings]]:
    """The services, the fake Slack and the Slack channel, all in this process; the channel
    on Socket Mode, or (`http`) on the Events API over HTTP."""
    (tmp / "script.yaml").write_text(script)
    port = free_port()
    url = f"http://127.0.0.1:{port}/slack/events" if http else None
    async with FakeSlack(ack_timeout=2.0, events_url=url) as fake:
        monkeypatch.setenv("TURNSTREAM_SLACK_BOT_TOKEN", fake.bot_token)
        if http:
            monkeypatch.delenv("TURNSTREAM_SLACK_APP_TOKEN", raising=False)
            monkeypatch.setenv("TURNSTREAM_SLACK_SIGNING_SECRET", fake.signing_secret)
            monkeypatch.setenv("TURNSTREAM_SLACK_HTTP_ADDR", f"127.0.0.1:{port}")
        else:
            monkeypatch.setenv("TURNSTREAM_SLACK_APP_TOKEN", fake.app_token)
        policy = {"dm_policy": "open", "stream_interval_s": 0.2} | overrides.pop("slack", {})
        settings = settings_for(
            server,
            tmp,
            script=tmp / "script.yaml",
            slack_api_url=fake.api_url,
            slack=policy,
            **overrides,
        )
        stop = asyncio.Event()
        async with running_services(settings, bus):
            task = asyncio.create_task(slack_channel.serve(settings, stop, bus))
            try:
                if http:
                    await until(lambda: listening(port))
                else:
                    await fake.socket.wait_connected()
                yield fake, settings
            finally:
                stop.set()
                await asyncio.wait_for(task, 15)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def session_of(channel: str, thread_ts: str) -> str:
    return f"slack-{channel}-{thread_ts.replace('.', '_')}"


async def until(check: Any, timeout: float = 60) -> None:
    async with asyncio.timeout(timeout):
        while True:
            if await check() if asyncio.iscoroutinefunction(check) else check():
                return
            await asyncio.sleep(0.05)


async def ended(bus: Bus, session: str, turns: int = 1) -> list[Any]:
    async def done() -> bool:
        return sum(isinstance(e, TurnEnded) for e in await events_of(bus, session)) >= turns

    await until(done)
    return await events_of(bus, session)


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


async def cli(server: EmbeddedServer, *args: str) -> tuple[int, str]:
    """`turnstream channels pairing <args> --platform slack`, as the owner runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTREAM_")}
    env.update(TURNSTREAM_NATS_URL=server.url, TURNSTREAM_CONFIG=os.devnull + ".absent.yaml")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "turnstream.cli",
        "channels",
        "pairing",
        *args,
        "--platform",
        "slack",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await process.communicate()
    return int(process.returncode or 0), out.decode()


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


async def test_events_api_over_http_with_signed_requests(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with channel_up(nats_server, bus, tmp_path, monkeypatch, http=True) as (fake, _):
        _event, root = await fake.user_says("D0HTTP", "U0ALICE", "over http")
        await ended(bus, session_of("D0HTTP", root))
        await until(lambda: any(m.text == REPLY for m in fake.bot_messages("D0HTTP")))
        assert fake.socket.http_statuses[0] == 200 and fake.socket.connects == 0
        forged_event = fake.message_event(fake.find("D0HTTP", root)) | {"client_msg_id": "x"}
        body = fake.socket.event_callback(forged_event)
        url = fake.events_url
        assert url is not None
        status = await post(url, "not-the-secret", "events_api", body, 0, 5.0)
        assert status == 401
        assert len(fake.bot_messages("D0HTTP")) == 1


async def test_slack_is_acked_only_after_the_command_is_stored(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stored_at: list[float] = []

    async def slow_publish(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(2.5)  # past the fake's 2 s: Slack sends the event again
        result = await publish_command(*args, **kwargs)
        stored_at.append(time.monotonic())
        return result

    monkeypatch.setattr(channel_service, "publish_command", slow_publish)
    async with channel_up(nats_server, bus, tmp_path, monkeypatch) as (fake, _):
        event_id, root = await fake.user_says("D0SLOW", "U0ALICE", "take your time")
        await fake.socket.wait_acked_event(event_id, timeout=60)
        await ended(bus, session_of("D0SLOW", root))
        deliveries = fake.socket.deliveries_of(event_id)
        assert [d.retry_attempt for d in deliveries][:2] == [0, 1], "re-sent while unacked"
        acked = [
            fake.socket.acked_at[d.envelope_id]
            for d in deliveries
            if fake.socket.acked(d.envelope_id)
        ]
        assert acked and min(acked) >= stored_at[0], "acked before the command was stored"
        accepted = [
            e
            for e in await events_of(bus, session_of("D0SLOW", root))
            if isinstance(e, InputAccepted)
        ]
        assert len(accepted) == 1


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


async def test_over_http_a_request_answered_late_is_sent_again_and_is_one_turn(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def slow_publish(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(2.5)  # past the fake's 2 s: Slack retries (X-Slack-Retry-Num)
        return await publish_command(*args, **kwargs)

    monkeypatch.setattr(channel_service, "publish_command", slow_publish)
    async with channel_up(nats_server, bus, tmp_path, monkeypatch, http=True) as (fake, _):
        _event, root = await fake.user_says("D0LATE", "U0ALICE", "take your time")
        await ended(bus, session_of("D0LATE", root))
        await until(lambda: 200 in fake.socket.http_statuses)
        assert fake.socket.http_statuses[0] is None, "the first answer came too late"
        accepted = [
            e
            for e in await events_of(bus, session_of("D0LATE", root))
            if isinstance(e, InputAccepted)
        ]
        assert len(accepted) == 1


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
