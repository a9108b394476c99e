"""The fake Slack's Socket Mode side: the websocket `apps.connections.open` points at, and
delivery of envelopes until acked (Slack re-delivers an unacked `events_api` envelope after
its timeout, three times, each with a new envelope id and `retry_attempt` + 1; an
`interactive` one is sent once)."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import WSCloseCode, WSMsgType, web

from tests.channels.fake_slack_http import post

if TYPE_CHECKING:
    from tests.channels.fake_slack import FakeSlack

JSON = dict[str, Any]
MAX_RETRIES = 3


@dataclass(frozen=True)
class Envelope:
    """One envelope as sent on a connection."""

    envelope_id: str
    type: str
    payload: JSON
    retry_attempt: int


class SocketMode:
    """See the module docstring."""

    def __init__(self, slack: FakeSlack, *, ack_timeout: float) -> None:
        self.slack = slack
        self.ack_timeout = ack_timeout
        self.connections: list[web.WebSocketResponse] = []
        self.connects = 0
        """How many websocket connections were opened (a reconnect counts)."""
        self.sent: list[Envelope] = []
        self.acks: list[JSON] = []
        """Every ack received, as sent (`envelope_id`, optional `payload`)."""
        self.acked_at: dict[str, float] = {}
        """When each acked envelope was acked (`time.monotonic()`)."""
        self.http_statuses: list[int | None] = []
        """Over HTTP: each delivery's status (None: no answer in time)."""
        self._acked: dict[str, asyncio.Event] = {}
        self._connected = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._event_ids = itertools.count(1)

    # -- the websocket ------------------------------------------------------------------

    async def websocket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        if not request.query.get("ticket"):
            await ws.close(code=WSCloseCode.POLICY_VIOLATION, message=b"invalid_ticket")
            return ws
        self.connections.append(ws)
        self.connects += 1
        await ws.send_json(
            {
                "type": "hello",
                "num_connections": len(self.connections),
                "debug_info": {"host": "applink-fake", "approximate_connection_time": 18060},
                "connection_info": {"app_id": self.slack.app_id},
            }
        )
        self._connected.set()
        try:
            async for frame in ws:
                if frame.type == WSMsgType.TEXT:
                    self._ack(json.loads(frame.data))
        finally:
            self.connections.remove(ws)
            if not self.connections:
                self._connected.clear()
        return ws

    def _ack(self, data: JSON) -> None:
        envelope_id = data.get("envelope_id")
        if isinstance(envelope_id, str) and envelope_id in self._acked:
            self.acks.append(data)
            self.acked_at[envelope_id] = time.monotonic()
            self._acked[envelope_id].set()

    async def drop(self, *, graceful: bool = False) -> None:
        """Close every connection: with a `disconnect` message first (`graceful`, as Slack
        does before a refresh), or at once, as a network failure would."""
        for ws in list(self.connections):
            if graceful:
                disconnect = {"type": "disconnect", "reason": "refresh_requested"}
                await ws.send_json(disconnect | {"debug_info": {"host": "applink-fake"}})
            else:
                await ws.close(code=WSCloseCode.GOING_AWAY)

    async def wait_connected(self, timeout: float = 10) -> None:
        async with asyncio.timeout(timeout):
            await self._connected.wait()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with suppress(asyncio.CancelledError):
                await task
        for ws in list(self.connections):
            await ws.close()

    # -- delivery -----------------------------------------------------------------------

    def event_callback(self, event: JSON) -> JSON:
        """The `events_api` payload Slack wraps an event in, with a fresh `event_id`."""
        n = next(self._event_ids)
        return {
            "token": "verification-token",
            "team_id": self.slack.team_id,
            "api_app_id": self.slack.app_id,
            "event": event,
            "type": "event_callback",
            "event_id": f"Ev{n:08d}",
            "event_time": 1_700_000_000 + n,
            "authorizations": [
                {
                    "enterprise_id": None,
                    "team_id": self.slack.team_id,
                    "user_id": self.slack.bot_user,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
            "event_context": f"ctx-{n}",
        }

    async def deliver_event(self, event: JSON) -> str:
        """Deliver `event` as an `events_api` envelope until acked; returns its `event_id`."""
        payload = self.event_callback(event)
        await self.deliver("events_api", payload)
        return str(payload["event_id"])

    async def deliver(self, kind: str, payload: JSON) -> str:
        """Start delivering; returns the first envelope's id (sent once connected)."""
        first = str(uuid.uuid4())
        self.deliver_soon(kind, payload, first)
        await asyncio.sleep(0)
        return first

    def deliver_soon(self, kind: str, payload: JSON, first: str | None = None) -> None:
        task = asyncio.get_running_loop().create_task(
            self._deliver(kind, payload, first or str(uuid.uuid4()))
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver(self, kind: str, payload: JSON, envelope_id: str) -> None:
        attempts = MAX_RETRIES + 1 if kind == "events_api" else 1
        if self.slack.events_url is not None:  # the Events API over HTTP
            for attempt in range(attempts):
                envelope = Envelope(envelope_id, kind, payload, attempt)
                self.sent.append(envelope)
                url, secret = self.slack.events_url, self.slack.signing_secret
                status = await post(url, secret, kind, payload, attempt, self.ack_timeout)
                self.http_statuses.append(status)
                if status == 200:
                    self._acked.setdefault(envelope_id, asyncio.Event()).set()
                    return
                envelope_id = str(uuid.uuid4())
            return
        for attempt in range(attempts):
            acked = self._acked.setdefault(envelope_id, asyncio.Event())
            envelope = Envelope(envelope_id, kind, payload, attempt)
            await self._send(envelope)
            with suppress(TimeoutError):
                async with asyncio.timeout(self.ack_timeout):
                    await acked.wait()
                    return
            envelope_id = str(uuid.uuid4())

    async def _send(self, envelope: Envelope) -> None:
        while True:
            await self._connected.wait()
            if not self.connections:
                continue
            frame: JSON = {
                "envelope_id": envelope.envelope_id,
                "payload": envelope.payload,
                "type": envelope.type,
                "accepts_response_payload": envelope.type != "events_api",
            }
            if envelope.type == "events_api":
                frame["retry_attempt"] = envelope.retry_attempt
                frame["retry_reason"] = "timeout" if envelope.retry_attempt else ""
            try:
                await self.connections[0].send_json(frame)
            except ConnectionError:
                await asyncio.sleep(0.05)
                continue
            self.sent.append(envelope)
            return

    # -- reading ------------------------------------------------------------------------

    def acked(self, envelope_id: str) -> bool:
        return envelope_id in self._acked and self._acked[envelope_id].is_set()

    def deliveries_of(self, event_id: str) -> list[Envelope]:
        return [e for e in self.sent if e.payload.get("event_id") == event_id]

    async def wait_acked_event(self, event_id: str, timeout: float = 10) -> None:
        """Until some delivery of `event_id` is acked."""
        async with asyncio.timeout(timeout):
            while True:
                if any(self.acked(e.envelope_id) for e in self.deliveries_of(event_id)):
                    return
                await asyncio.sleep(0.02)
