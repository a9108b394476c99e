"""The Slack channel on the Events API over HTTP (no app token, a signing secret), and the
ack to Slack held until the command is stored, both ways: real services, a real
nats-server, the fake Slack."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("slack_bolt")

from tests.channels.fake_slack_http import post
from tests.channels.slack_harness import REPLY, channel_up, ended, session_of, until
from tests.integration.conftest import events_of
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.channels import service as channel_service
from turnstream.client import publish_command
from turnstream.core.events import InputAccepted

pytestmark = pytest.mark.integration


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
