"""A fake Slack: the Web API and the Socket Mode websocket, on one loopback aiohttp server.

Point the official SDKs at it and drive it from a test:

    async with FakeSlack() as slack:
        client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
        app = AsyncApp(client=client)                     # Bolt's auth.test goes here too
        handler = AsyncSocketModeHandler(app, slack.app_token)  # apps.connections.open too
        await handler.connect_async()
        event_id, ts = await slack.user_says("D0DM", "U0ALICE", "hello")

The wire is Slack's: `POST /api/<method>` with a bearer token and a form, query or JSON body;
answers `{"ok": true, ...}` or HTTP 200 `{"ok": false, "error": "..."}`; `invalid_auth` for
a token it does not know, `not_authed` without one, `not_allowed_token_type` for the wrong
kind; a rate limit is HTTP 429 with `Retry-After` and `{"ok": false, "error":
"ratelimited"}` (`slack.rate_limit(method)` injects one). Socket Mode sends `hello`, then
`events_api` / `interactive` envelopes; an envelope not acked (`{"envelope_id": ...}`) within
`ack_timeout` is re-delivered with a new envelope id, `retry_attempt` + 1 and `retry_reason:
timeout`, up to three times, as Slack does. A message the bot posts is echoed back to it as
a `message` event with its `bot_id`, as Slack does, so bot-loop protection is exercised.

With `events_url` it plays the Events API over HTTP instead (`fake_slack_http`): the same
deliveries POSTed to the app's request URL, signed with `signing_secret`, re-sent when not
answered 200 in time. `slack.fail(method, error, status=...)` injects an error (a 5xx
too); `slack.hold(method)` lets the next call take effect and holds its answer, so a test
can kill the caller in between (the post made, its answer lost).

Every Web API call is recorded in `slack.calls` (rate-limited and failed ones too).
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from aiohttp import web

from tests.channels.fake_slack_files import SlackFiles
from tests.channels.fake_slack_methods import METHODS, SlackError, required
from tests.channels.fake_slack_socket import SocketMode

JSON = dict[str, Any]
_CLOCK = itertools.count(1)
"""Message timestamps, unique across the fakes of a test process (a session per thread)."""


@dataclass
class Call:
    """One Web API request as the fake received it."""

    method: str
    args: JSON
    token: str | None
    status: int
    """The HTTP status answered (200 or 429)."""
    response: JSON


@dataclass
class Message:
    """A message in a conversation."""

    channel: str
    ts: str
    text: str
    user: str
    bot_id: str | None = None
    thread_ts: str | None = None
    blocks: list[JSON] | None = None
    metadata: JSON | None = None
    streaming: bool = False
    """A `chat.startStream` message not yet stopped."""
    edits: int = 0
    reply_users: set[str] = field(default_factory=set)

    def wire(self, *, with_metadata: bool = True) -> JSON:
        out: JSON = {"type": "message", "text": self.text, "user": self.user, "ts": self.ts}
        if self.bot_id is not None:
            out["bot_id"] = self.bot_id
            out["app_id"] = "A0FAKEAPP"
        if self.thread_ts is not None:
            out["thread_ts"] = self.thread_ts
        if self.blocks is not None:
            out["blocks"] = self.blocks
        if self.metadata is not None and with_metadata:
            out["metadata"] = self.metadata
        if self.edits:
            out["edited"] = {"user": self.user, "ts": self.ts}
        return out


@dataclass
class Hold:
    reached: asyncio.Event
    released: asyncio.Event

    async def wait(self, timeout: float = 30) -> None:
        async with asyncio.timeout(timeout):
            await self.reached.wait()


class FakeSlack:
    """One workspace with one bot; see the module docstring."""

    team_id = "T0FAKE"
    bot_user = "U0BOT"
    bot_id = "B0BOT"
    app_id = "A0FAKEAPP"

    def __init__(
        self,
        *,
        bot_token: str = "xoxb-fake-bot-token-0123456789",
        app_token: str = "xapp-fake-app-token-0123456789",
        ack_timeout: float = 3.0,
        echo_bot_messages: bool = True,
        events_url: str | None = None,
        signing_secret: str = "fake-signing-secret-0123456789",
    ) -> None:
        self.events_url = events_url
        """Deliver to this request URL (the Events API over HTTP) instead of Socket Mode."""
        self.signing_secret = signing_secret
        self.bot_token = bot_token
        self.app_token = app_token
        self.echo_bot_messages = echo_bot_messages
        self.calls: list[Call] = []
        self.messages: dict[str, list[Message]] = {}
        self.statuses: list[JSON] = []
        self.ephemeral: list[JSON] = []
        self.reactions: list[JSON] = []
        self.socket = SocketMode(self, ack_timeout=ack_timeout)
        self.files = SlackFiles(bot_token)
        self._limits: dict[str, list[int]] = {}
        self._holds: dict[str, Hold] = {}
        self._errors: dict[str, list[tuple[str, int]]] = {}
        self._clock = _CLOCK
        self._runner: web.AppRunner | None = None
        self.port = 0

    # -- lifecycle ----------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/link/", self.socket.websocket)
        self.files.route(app)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.base_events.Server)
        self.port = server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        for hold in self._holds.values():
            hold.released.set()
        await self.socket.close()
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def api_url(self) -> str:
        """The Web API base URL, as `AsyncWebClient(base_url=...)` takes it."""
        return f"http://127.0.0.1:{self.port}/api/"

    # -- faults -------------------------------------------------------------------------

    def rate_limit(self, method: str, *, retry_after: int = 1, times: int = 1) -> None:
        """Answer the next `times` calls of `method` with 429 and `Retry-After`."""
        self._limits.setdefault(method, []).extend([retry_after] * times)

    def hold(self, method: str) -> Hold:
        """The next successful call of `method` takes effect, then its answer waits for
        `release()` (kill the caller meanwhile: the post is made and its answer lost)."""
        self._holds[method] = hold = Hold(asyncio.Event(), asyncio.Event())
        return hold

    def fail(self, method: str, error: str, *, times: int = 1, status: int = 200) -> None:
        """Answer the next `times` calls of `method` with `{"ok": false, "error": error}`, as
        HTTP `status` (200, as Slack answers its errors; a 5xx when it is in trouble)."""
        self._errors.setdefault(method, []).extend([(error, status)] * times)

    # -- what users do ------------------------------------------------------------------

    async def user_says(
        self,
        channel: str,
        user: str,
        text: str,
        *,
        thread_ts: str | None = None,
        bot_id: str | None = None,
        event_type: str = "message",
        files: Sequence[tuple[str, str, bytes]] = (),
    ) -> tuple[str, str]:
        """`user` posts `text` in `channel` (a `D…` id is a DM, else a channel), sharing
        `files` (`(name, mimetype, bytes)`); Slack delivers the event over Socket Mode.
        Returns `(event_id, ts)`."""
        message = self._store(channel, text, user, thread_ts=thread_ts, bot_id=bot_id)
        event = self.message_event(message)
        if event_type == "app_mention":
            event["type"] = "app_mention"
        if files:
            base = self.api_url.removesuffix("/api/")
            shared = [self.files.share(base, *f) for f in files]
            event |= {"subtype": "file_share", "files": shared}
        event_id = await self.socket.deliver_event(event)
        return event_id, message.ts

    def message_event(self, message: Message) -> JSON:
        event = message.wire(with_metadata=False)
        event |= {
            "channel": message.channel,
            "channel_type": "im" if message.channel.startswith("D") else "channel",
            "event_ts": message.ts,
            "team": self.team_id,
        }
        if message.bot_id is None:
            event["client_msg_id"] = f"cm-{message.channel}-{message.ts}"
        return event

    async def press(
        self, user: str, channel: str, message_ts: str, action_id: str, value: str
    ) -> str:
        """`user` presses the button `action_id` of the bot's message; returns the envelope
        id of the `block_actions` delivery."""
        message = self.find(channel, message_ts)
        payload: JSON = {
            "type": "block_actions",
            "user": {"id": user, "username": user.lower(), "name": user.lower()},
            "api_app_id": self.app_id,
            "token": "verification-token",
            "team": {"id": self.team_id, "domain": "fake"},
            "channel": {"id": channel, "name": channel.lower()},
            "container": {
                "type": "message",
                "message_ts": message_ts,
                "channel_id": channel,
                "is_ephemeral": False,
                **({"thread_ts": message.thread_ts} if message.thread_ts else {}),
            },
            "trigger_id": f"tr-{next(self._clock)}",
            "message": message.wire(),
            "response_url": f"http://127.0.0.1:{self.port}/response/{message_ts}",
            "actions": [
                {
                    "action_id": action_id,
                    "block_id": _block_of(message, action_id),
                    "type": "button",
                    "value": value,
                    "action_ts": self._ts(),
                }
            ],
        }
        return await self.socket.deliver("interactive", payload)

    # -- reading the workspace ----------------------------------------------------------

    def find(self, channel: str, ts: str) -> Message:
        for message in self.messages.get(channel, []):
            if message.ts == ts:
                return message
        raise KeyError(f"no message {ts} in {channel}")

    def bot_messages(self, channel: str) -> list[Message]:
        return [m for m in self.messages.get(channel, []) if m.bot_id == self.bot_id]

    def calls_of(self, method: str, *, ok_only: bool = True) -> list[Call]:
        return [
            c
            for c in self.calls
            if c.method == method and (not ok_only or c.response.get("ok") is True)
        ]

    # -- the Web API --------------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args = await _arguments(request)
        token = _token(request, args)
        retry_after = _pop(self._limits, method)
        if retry_after is not None:
            body: JSON = {"ok": False, "error": "ratelimited"}
            self.calls.append(Call(method, args, token, 429, body))
            return web.json_response(body, status=429, headers={"Retry-After": str(retry_after)})
        status = 200
        try:
            body = self._answer(method, args, token)
        except SlackError as error:
            body, status = {"ok": False, "error": error.code}, error.status
        self.calls.append(Call(method, args, token, status, body))
        hold = self._holds.pop(method, None) if body["ok"] else None
        if hold is not None:
            hold.reached.set()
            await hold.released.wait()
        return web.json_response(body, status=status)

    def _answer(self, method: str, args: JSON, token: str | None) -> JSON:
        handler = METHODS.get(method)
        if handler is None:
            raise SlackError("unknown_method")
        if token is None:
            raise SlackError("not_authed")
        wanted = self.app_token if method == "apps.connections.open" else self.bot_token
        if token != wanted:
            known = token in (self.app_token, self.bot_token)
            raise SlackError("not_allowed_token_type" if known else "invalid_auth")
        failure = _pop(self._errors, method)
        if failure is not None:
            raise SlackError(*failure)
        return {"ok": True} | handler(self, args, token)

    # -- storage ------------------------------------------------------------------------

    def _ts(self) -> str:
        n = next(self._clock)
        return f"{1_700_000_000 + n}.{n:06d}"

    def _store(
        self,
        channel: str,
        text: str,
        user: str,
        *,
        thread_ts: str | None = None,
        bot_id: str | None = None,
        blocks: list[JSON] | None = None,
        metadata: JSON | None = None,
        streaming: bool = False,
    ) -> Message:
        if not (channel.startswith(("C", "D", "G")) and channel[1:].isalnum()):
            raise SlackError("channel_not_found")
        if thread_ts is not None:
            self.find_root(channel, thread_ts)
        message = Message(
            channel, self._ts(), text, user, bot_id, thread_ts, blocks, metadata, streaming
        )
        self.messages.setdefault(channel, []).append(message)
        return message

    def find_root(self, channel: str, thread_ts: str) -> Message:
        try:
            return self.find(channel, thread_ts)
        except KeyError:
            raise SlackError("thread_not_found") from None

    def _message_or_error(self, args: JSON) -> Message:
        channel, ts = required(args, "channel"), required(args, "ts")
        if channel not in self.messages:
            raise SlackError("channel_not_found")
        try:
            return self.find(channel, ts)
        except KeyError:
            raise SlackError("message_not_found") from None

    def _bot_posted(self, message: Message) -> None:
        if self.echo_bot_messages:
            event = self.message_event(message) | {"subtype": "bot_message"}
            self.socket.deliver_soon("events_api", self.socket.event_callback(event))


def _block_of(message: Message, action_id: str) -> str:
    for block in message.blocks or []:
        for element in block.get("elements", []):
            if element.get("action_id") == action_id:
                return str(block.get("block_id", "b"))
    raise KeyError(f"no button {action_id} on {message.ts}")


def _pop(queue: dict[str, list[Any]], method: str) -> Any:
    pending = queue.get(method)
    return pending.pop(0) if pending else None


async def _arguments(request: web.Request) -> JSON:
    args: JSON = dict(request.query)
    if request.content_type == "application/json":
        args |= await request.json()
    elif request.can_read_body:
        args |= dict(await request.post())
    for key in ("blocks", "metadata", "chunks"):
        if isinstance(args.get(key), str):
            args[key] = json.loads(args[key])
    return args


def _token(request: web.Request, args: JSON) -> str | None:
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer "):
        return header.removeprefix("Bearer ")
    token = args.pop("token", None)
    return str(token) if token else None
