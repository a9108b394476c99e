"""The fake Slack speaks Slack's wire: the official SDKs (slack_sdk's AsyncWebClient, Bolt's
AsyncApp over Socket Mode) work against it unchanged, and it answers errors, rate limits and
re-deliveries as Slack does."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("slack_bolt")

from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from tests.channels.fake_slack import FakeSlack


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(ack_timeout=0.5) as fake:
        yield fake


def web(slack: FakeSlack, token: str | None = None, **kw: Any) -> AsyncWebClient:
    return AsyncWebClient(token=token or slack.bot_token, base_url=slack.api_url, **kw)


async def test_auth_and_token_errors(slack: FakeSlack) -> None:
    auth = await web(slack).auth_test()
    assert (auth["user_id"], auth["bot_id"], auth["team_id"]) == ("U0BOT", "B0BOT", "T0FAKE")
    with pytest.raises(SlackApiError) as wrong:
        await web(slack, "xoxb-wrong").auth_test()
    assert wrong.value.response["error"] == "invalid_auth"
    with pytest.raises(SlackApiError) as app_token:
        await web(slack, slack.app_token).chat_postMessage(channel="D0DM", text="x")
    assert app_token.value.response["error"] == "not_allowed_token_type"
    with pytest.raises(SlackApiError) as unknown:
        await web(slack).api_call("chat.nope")
    assert unknown.value.response["error"] == "unknown_method"
    assert [c.response["ok"] for c in slack.calls] == [True, False, False, False]


async def test_post_metadata_update_and_replies(slack: FakeSlack) -> None:
    client = web(slack)
    _event_id, root = await slack.user_says("C0TEAM", "U0ALICE", "<@U0BOT> hi")
    meta = {"event_type": "turnstream_reply", "event_payload": {"turn_id": "t-1"}}
    posted = await client.chat_postMessage(
        channel="C0TEAM", thread_ts=root, text="working", metadata=meta
    )
    assert posted["message"]["metadata"] == meta
    await client.chat_update(channel="C0TEAM", ts=posted["ts"], text="*done*")
    plain = await client.conversations_replies(channel="C0TEAM", ts=root)
    assert [m["text"] for m in plain["messages"]] == ["<@U0BOT> hi", "*done*"]
    assert "metadata" not in plain["messages"][1]
    full = await client.conversations_replies(channel="C0TEAM", ts=root, include_all_metadata=True)
    assert full["messages"][1]["metadata"] == meta
    paged = await client.conversations_replies(channel="C0TEAM", ts=root, limit=1)
    assert paged["has_more"] and paged["response_metadata"]["next_cursor"]
    for call, error in [
        (client.chat_update(channel="C0TEAM", ts=root, text="mine now"), "cant_update_message"),
        (client.chat_update(channel="C0TEAM", ts="1.000001", text="x"), "message_not_found"),
        (client.conversations_replies(channel="C0TEAM", ts="9.000009"), "thread_not_found"),
        (client.chat_postMessage(channel="nope", text="x"), "channel_not_found"),
        (client.api_call("chat.postMessage", json={"channel": "C0TEAM"}), "no_text"),
    ]:
        with pytest.raises(SlackApiError) as failed:
            await call
        assert failed.value.response["error"] == error


async def test_chat_stream_helper(slack: FakeSlack) -> None:
    client = web(slack)
    _event_id, root = await slack.user_says("D0DM", "U0ALICE", "hello")
    stream = await client.chat_stream(channel="D0DM", thread_ts=root, buffer_size=5)
    await stream.append(markdown_text="Hel")
    assert stream.ts is None
    await stream.append(markdown_text="lo, ")
    assert stream.ts is not None
    await stream.append(markdown_text="world")
    meta = {"event_type": "turnstream_reply", "event_payload": {"turn_id": "t-2"}}
    await stream.stop(markdown_text="!", metadata=meta)
    message = slack.find("D0DM", stream.ts)
    assert (message.text, message.streaming, message.metadata) == ("Hello, world!", False, meta)
    methods = [c.method for c in slack.calls if c.method.startswith("chat.")]
    assert methods == ["chat.startStream", "chat.appendStream", "chat.stopStream"]
    with pytest.raises(SlackApiError) as stopped:
        await client.chat_appendStream(channel="D0DM", ts=stream.ts, markdown_text="more")
    assert stopped.value.response["error"] == "message_not_in_streaming_state"
    _event_id, team_root = await slack.user_says("C0TEAM", "U0ALICE", "hi")
    with pytest.raises(SlackApiError) as outside_dm:
        await client.chat_startStream(channel="C0TEAM", thread_ts=team_root, markdown_text="x")
    assert outside_dm.value.response["error"] == "missing_recipient_team_id"


async def test_status_ephemeral_reaction(slack: FakeSlack) -> None:
    client = web(slack)
    _event_id, root = await slack.user_says("D0DM", "U0ALICE", "hello")
    await client.assistant_threads_setStatus(channel_id="D0DM", thread_ts=root, status="is typing")
    await client.chat_postEphemeral(channel="D0DM", user="U0BOB", text="not yours")
    await client.reactions_add(channel="D0DM", timestamp=root, name="eyes")
    with pytest.raises(SlackApiError) as again:
        await client.reactions_add(channel="D0DM", timestamp=root, name="eyes")
    assert again.value.response["error"] == "already_reacted"
    assert slack.statuses == [{"channel_id": "D0DM", "thread_ts": root, "status": "is typing"}]
    assert slack.ephemeral[0]["user"] == "U0BOB"


async def test_rate_limit_is_429_with_retry_after(slack: FakeSlack) -> None:
    slack.rate_limit("chat.postMessage", retry_after=1)
    with pytest.raises(SlackApiError) as limited:
        await web(slack).chat_postMessage(channel="D0DM", text="once")
    assert limited.value.response.status_code == 429
    assert limited.value.response.headers["Retry-After"] == "1"
    assert limited.value.response["error"] == "ratelimited"
    slack.rate_limit("chat.postMessage", retry_after=1)
    patient = web(slack, retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=2)])
    began = time.monotonic()
    await patient.chat_postMessage(channel="D0DM", text="once")
    assert time.monotonic() - began >= 1
    assert [c.status for c in slack.calls] == [429, 429, 200]
    assert [m.text for m in slack.bot_messages("D0DM")] == ["once"]


async def test_bolt_socket_mode_events_and_buttons(slack: FakeSlack) -> None:
    app = AsyncApp(client=web(slack))
    seen: list[dict[str, Any]] = []
    pressed: list[str] = []

    @app.event("message")
    async def on_message(event: dict[str, Any]) -> None:
        seen.append(event)

    @app.action("approve")
    async def on_approve(ack: Any, body: dict[str, Any]) -> None:
        await ack()
        pressed.append(body["user"]["id"])

    handler = AsyncSocketModeHandler(app, slack.app_token)
    await handler.connect_async()
    try:
        await slack.socket.wait_connected()
        event_id, root = await slack.user_says("D0DM", "U0ALICE", "hello")
        await slack.socket.wait_acked_event(event_id)
        await _until(lambda: len(seen) == 1)
        assert seen[0]["client_msg_id"] and seen[0]["channel_type"] == "im"
        blocks = [
            {
                "type": "actions",
                "block_id": "approval",
                "elements": [
                    {
                        "type": "button",
                        "action_id": "approve",
                        "text": {"type": "plain_text", "text": "Approve"},
                        "value": "i-1",
                    }
                ],
            }
        ]
        prompt = await app.client.chat_postMessage(
            channel="D0DM", thread_ts=root, text="Run it?", blocks=blocks
        )
        envelope = await slack.press("U0ALICE", "D0DM", prompt["ts"], "approve", "i-1")
        await _until(lambda: pressed == ["U0ALICE"] and slack.socket.acked(envelope))
        await asyncio.sleep(0.3)
        assert len(seen) == 1, "Bolt ignores its own posts, which the fake echoes"
        await slack.socket.drop()
        await _until(lambda: slack.socket.connects == 2, timeout=15)
        await slack.user_says("D0DM", "U0ALICE", "again")
        await _until(lambda: len(seen) == 2)
    finally:
        await handler.close_async()


async def test_unacked_envelope_is_redelivered(slack: FakeSlack) -> None:
    received: list[SocketModeRequest] = []

    async def listener(client: Any, request: SocketModeRequest) -> None:
        received.append(request)
        if request.retry_attempt:
            await client.send_socket_mode_response(SocketModeResponse(request.envelope_id))

    client = SocketModeClient(slack.app_token, web_client=web(slack))
    client.socket_mode_request_listeners.append(listener)
    await client.connect()
    try:
        event_id, _ts = await slack.user_says("D0DM", "U0ALICE", "hello")
        await slack.socket.wait_acked_event(event_id)
        assert [(r.retry_attempt, r.retry_reason) for r in received] == [(0, ""), (1, "timeout")]
        assert len({r.envelope_id for r in received}) == 2
        assert {r.payload["event_id"] for r in received} == {event_id}
    finally:
        await client.close()


async def _until(check: Any, timeout: float = 10) -> None:
    async with asyncio.timeout(timeout):
        while True:
            if check():
                return
            await asyncio.sleep(0.02)
