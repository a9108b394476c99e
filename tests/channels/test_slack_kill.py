"""The Slack channel as a real process (`python -m turnstream.channels.slack`), killed with
SIGKILL at each point of the posting sequence and restarted: the reply completes in the
message already posted and nothing is posted twice, including a post Slack accepted and
the channel never recorded (found again by its metadata). The services run in this
process against a real nats-server; Slack is the fake, in this process too."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("slack_bolt")

from tests.channels.fake_slack import FakeSlack
from tests.integration.conftest import events_of, running_services, settings_for
from tests.polling import eventually
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.channels.slack_mrkdwn import to_mrkdwn
from turnstream.core.events import InputAccepted, TurnEnded

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
REPLY = "Long **answer**: " + " ".join(f"word{i}" for i in range(24))
SCRIPT = f"""
replies:
  - text: "{REPLY}"
    delay_ms: 150
"""


class Channel:
    """The Slack channel process; its output in `<root>/channel.log`."""

    def __init__(self, root: Path, server: EmbeddedServer, slack: FakeSlack) -> None:
        self.log = root / "channel.log"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTREAM_")}
        self.env.update(
            PYTHONPATH=str(ROOT),
            TURNSTREAM_NATS_URL=server.url,
            TURNSTREAM_DATA_DIR=str(root),
            TURNSTREAM_CONFIG=str(root / "absent.yaml"),
            TURNSTREAM_LOG_PARTITIONS=str(server.subjects.log_partitions),
            TURNSTREAM_LOG_LEVEL="DEBUG",  # the tokens must stay out even at DEBUG
            TURNSTREAM_SLACK_BOT_TOKEN=slack.bot_token,
            TURNSTREAM_SLACK_APP_TOKEN=slack.app_token,
            TURNSTREAM_SLACK_API_URL=slack.api_url,
            TURNSTREAM_SLACK__DM_POLICY="open",
            TURNSTREAM_SLACK__STREAM_INTERVAL_S="0.2",
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "turnstream.channels.slack"],
                env=self.env,
                stdout=out,
                stderr=out,
                cwd=ROOT,
            )

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextlib.asynccontextmanager
async def deployment(
    server: EmbeddedServer, bus: Bus, tmp: Path, script: str = SCRIPT, **overrides: Any
) -> AsyncIterator[tuple[FakeSlack, Channel]]:
    (tmp / "script.yaml").write_text(script)
    settings = settings_for(server, tmp, script=tmp / "script.yaml", **overrides)
    async with FakeSlack(ack_timeout=2.0) as slack, running_services(settings, bus):
        channel = Channel(tmp, server, slack)
        channel.start()
        try:
            await slack.socket.wait_connected(timeout=60)
            yield slack, channel
        finally:
            channel.stop()
            log = channel.log.read_text()
            assert slack.bot_token not in log and slack.app_token not in log
            assert "Traceback" not in log


async def restart(slack: FakeSlack, channel: Channel) -> None:
    connects = slack.socket.connects
    channel.start()
    await eventually(lambda: slack.socket.connects > connects, 60)


async def turn_ended(bus: Bus, session: str) -> list[Any]:
    async with asyncio.timeout(60):
        while True:
            events = await events_of(bus, session)
            if any(isinstance(e, TurnEnded) for e in events):
                return events
            await asyncio.sleep(0.1)


def session_of(channel: str, ts: str) -> str:
    return f"slack-{channel}-{ts.replace('.', '_')}"


async def test_killed_mid_stream_the_reply_completes_in_the_same_message(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path
) -> None:
    async with deployment(nats_server, bus, tmp_path) as (slack, channel):
        _event, root = await slack.user_says("D0DM", "U0ALICE", "tell me a lot")
        await eventually(lambda: slack.calls_of("chat.appendStream"), 60)
        channel.kill9()
        [streaming] = slack.bot_messages("D0DM")
        assert streaming.streaming and streaming.text != REPLY
        await restart(slack, channel)
        events = await turn_ended(bus, session_of("D0DM", root))
        await eventually(lambda: slack.calls_of("chat.stopStream"), 60)
        [reply] = slack.bot_messages("D0DM")
        assert reply.ts == streaming.ts and reply.text == REPLY and not reply.streaming
        assert len(slack.calls_of("chat.startStream")) == 1
        assert not slack.calls_of("chat.postMessage")
        assert len([e for e in events if isinstance(e, InputAccepted)]) == 1
        logged = str([e.model_dump() for e in events])
        assert slack.bot_token not in logged and slack.app_token not in logged


async def test_killed_after_a_post_before_its_record_it_is_found_by_metadata(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path
) -> None:
    async with deployment(nats_server, bus, tmp_path) as (slack, channel):
        slack.fail("chat.startStream", "feature_not_enabled", times=100)  # streams by edits
        held = slack.hold("chat.postMessage")
        _event, root = await slack.user_says("D0DM", "U0ALICE", "tell me a lot")
        await held.wait()  # Slack has the post; the channel has not its answer
        channel.kill9()
        held.released.set()
        await restart(slack, channel)
        await turn_ended(bus, session_of("D0DM", root))
        await eventually(lambda: slack.bot_messages("D0DM")[0].text == to_mrkdwn(REPLY), 60)
        await asyncio.sleep(1.0)
        [reply] = slack.bot_messages("D0DM")
        assert reply.metadata is not None and reply.metadata["event_payload"]["tag"].endswith(":0")
        assert len(slack.calls_of("chat.postMessage")) == 1
        lookups = slack.calls_of("conversations.replies")
        assert lookups and lookups[0].args["include_all_metadata"] in ("1", "true", "True", True)


async def test_killed_after_a_stream_started_before_its_record_it_is_taken_up(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path
) -> None:
    async with deployment(nats_server, bus, tmp_path) as (slack, channel):
        held = slack.hold("chat.startStream")
        _event, root = await slack.user_says("D0DM", "U0ALICE", "tell me a lot")
        await held.wait()
        channel.kill9()
        held.released.set()
        await restart(slack, channel)
        await turn_ended(bus, session_of("D0DM", root))
        await eventually(lambda: slack.calls_of("chat.stopStream"), 60)
        await asyncio.sleep(1.0)
        [reply] = slack.bot_messages("D0DM")
        assert reply.text == REPLY and not reply.streaming and reply.metadata is not None
        assert len(slack.calls_of("chat.startStream")) == 1
        assert not slack.calls_of("chat.postMessage")


async def test_killed_after_the_stream_stopped_before_its_record_it_is_not_posted_again(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path
) -> None:
    async with deployment(nats_server, bus, tmp_path) as (slack, channel):
        held = slack.hold("chat.stopStream")
        _event, root = await slack.user_says("D0DM", "U0ALICE", "tell me a lot")
        await held.wait()  # the stream is stopped; the channel never hears so
        channel.kill9()
        held.released.set()
        await restart(slack, channel)
        await turn_ended(bus, session_of("D0DM", root))
        await eventually(lambda: slack.calls_of("chat.stopStream", ok_only=False)[1:], 60)
        await asyncio.sleep(1.0)
        [reply] = slack.bot_messages("D0DM")
        # the stream showed it all, or the rest was in the stop: as it is, or edited to it
        assert reply.text in (REPLY, to_mrkdwn(REPLY)) and not reply.streaming
        assert len(slack.calls_of("chat.startStream")) == 1
        assert not slack.calls_of("chat.postMessage")


TOOL_SCRIPT = """
replies:
  - text: "writing a note"
    tool_calls: [{name: write_file, arguments: {path: note.txt, content: "hi"}}]
  - text: "done"
"""


async def test_killed_after_a_prompt_was_posted_before_its_record_it_is_found(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path
) -> None:
    async with deployment(nats_server, bus, tmp_path, TOOL_SCRIPT, security_mode="ask") as (
        slack,
        channel,
    ):
        held = slack.hold("chat.postMessage")
        _event, root = await slack.user_says("D0DM", "U0ALICE", "write a note")
        await held.wait()  # the prompt is in Slack; its ts never reached the channel
        channel.kill9()
        held.released.set()
        await restart(slack, channel)
        await eventually(lambda: slack.calls_of("conversations.replies"), 60)
        [prompt] = [m for m in slack.bot_messages("D0DM") if m.blocks and len(m.blocks) > 1]
        value = prompt.blocks[1]["elements"][0]["value"]
        await slack.press("U0ALICE", "D0DM", prompt.ts, "turnstream:approve", value)
        events = await turn_ended(bus, session_of("D0DM", root))
        assert [e.data.status for e in events if isinstance(e, TurnEnded)] == ["completed"]
        await eventually(lambda: len(prompt.blocks) == 1, 60)
        prompts = [c for c in slack.calls_of("chat.postMessage") if "prompt:" in str(c.args)]
        assert len(prompts) == 1, "the prompt was found by its metadata, not posted again"
