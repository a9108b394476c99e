"""The Slack channel's platform (`python -m turnstream.channels.slack`, docs/channels.md).

Slack through its official SDKs: Bolt for Python (async) over Socket Mode (or, without an
app token, the Events API over HTTP with signed requests) receives events and button
presses, `slack_sdk`'s `AsyncWebClient` posts. Both talk to `TURNSTREAM_SLACK_API_URL`
(Slack's own by default; the tests' fake otherwise), Socket Mode included (its
`apps.connections.open` goes through the same client).

    Slack                                        channel core
    message / app_mention event  ───────────►   Incoming (key: client_msg_id, else event_id)
    block_actions on our buttons ───────────►   Press
    Bolt's ack to Slack          ◄───────────   Delivery.ack, after the command is stored
    assistant.threads.setStatus  ◄───────────   typing (the tool running, as the status)
    chat.postMessage (+metadata) ◄───────────   post, post_tagged (a prompt, a reply's part)
    chat.update                  ◄───────────   edit
    chat.startStream/append/stop ◄───────────   the native stream (`channels.slack_posting`)
    chat.postEphemeral           ◄───────────   answer_press(alert): only the presser sees it
    conversations.replies        ◄───────────   find_tagged: a post made and not recorded

A 429 is raised as `RateLimited(Retry-After)` and waited out by the core (the SDK's own
retries are off for it: one loop, which the log shows); a Slack error is a
`PlatformError(method, error)` (transient for a 5xx or the network); the tokens are never
in a message or a log line.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from functools import partial
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_chat_stream import AsyncChatStream
from slack_sdk.web.async_client import AsyncWebClient

from turnstream.channels.platform import (
    Button,
    Chat,
    Delivery,
    File,
    Inbound,
    Limits,
    PlatformError,
    Press,
    RateLimited,
    TooLarge,
)
from turnstream.channels.slack_mrkdwn import to_mrkdwn
from turnstream.channels.slack_wire import (
    POSTED,
    SLASH_COMMANDS,
    Me,
    blocks,
    incoming,
    metadata,
    posted_with,
    press,
    press_target,
    slash,
)

log = logging.getLogger("turnstream.channels.slack")
T = TypeVar("T")
SECTION_CHARS = 3000
"""A section block's text limit: a longer message goes as text only (no buttons on it)."""
WORKING = "is working…"
STORE_WAIT_S = 30.0
"""How long a listener waits for the core to store what Slack sent before it gives up
unacknowledged (the core did not take it: Slack sends it again)."""
EVENTS_PATH = "/slack/events"
"""The request URL's path in HTTP mode (Event Subscriptions and Interactivity)."""
NOTICE = "notice"
"""The tag of a post that is no part of a turn (a refusal, a pairing code)."""
_ACTIONS = re.compile(r"^turnstream:(approve|deny|stop)$")


class SlackPlatform:
    """Slack, as the channel core's `Platform` (see the module docstring)."""

    name = "slack"
    limits = Limits(text=12_000, default_scope="thread", typing_every_s=20.0)

    def __init__(
        self,
        bot_token: str,
        app_token: str | None,
        api_url: str,
        *,
        signing_secret: str | None = None,
        listen: tuple[str, int] = ("127.0.0.1", 3000),
    ) -> None:
        """Socket Mode with `app_token`; else the Events API over HTTP on `listen`, every
        request checked against `signing_secret`."""
        if app_token is None and not signing_secret:
            raise ValueError("Slack needs an app token (Socket Mode) or a signing secret (HTTP)")
        self.client = AsyncWebClient(token=bot_token, base_url=api_url, logger=log)
        self._app_token = app_token
        self._file_hosts = {"files.slack.com", "slack.com", urlsplit(api_url).hostname}
        self._signing_secret = signing_secret
        self._listen = listen
        self._runner: web.AppRunner | None = None
        self._me: Me | None = None
        self._streams: dict[str, AsyncChatStream] = {}
        self._handler: AsyncSocketModeHandler | None = None
        self._threads: dict[tuple[str, str], str | None] = {}
        """The thread each user last wrote to the bot in, per conversation: where their
        slash commands go (Slack's slash payload names no thread)."""

    async def me(self) -> Me:
        """Who the bot is (`auth.test`, once)."""
        if self._me is None:
            auth = await self._call("auth.test", self.client.auth_test)
            self._me = Me(str(auth["user_id"]), str(auth["bot_id"]), str(auth["team_id"]))
        return self._me

    # -- inbound ------------------------------------------------------------------------

    async def receive(self) -> AsyncIterator[Delivery]:
        me = await self.me()
        queue: asyncio.Queue[Delivery] = asyncio.Queue()
        app = AsyncApp(
            client=self.client,
            logger=log,
            process_before_response=True,  # Slack is acked when the listener returns
            ignoring_self_events_enabled=False,  # the core tells its own echoes apart
            signing_secret=self._signing_secret or "",
            request_verification_enabled=self._app_token is None,  # HTTP: signed requests
        )

        async def handed(item: Inbound) -> None:
            """Hand `item` to the core and return (Bolt then acks) once it is stored."""
            stored = asyncio.Event()

            async def ack() -> None:
                stored.set()

            await queue.put(Delivery([item], ack))
            async with asyncio.timeout(STORE_WAIT_S):  # not taken: unacked, Slack sends again
                await stored.wait()

        async def on_event(body: dict[str, Any], event: dict[str, Any]) -> None:
            item = incoming(event, str(body.get("event_id", "")), me)
            if item is not None:
                if len(self._threads) > 10_000:
                    self._threads.clear()
                self._threads[(item.chat.id, item.user)] = item.chat.thread
                await handed(item)

        async def on_command(ack: Callable[[], Awaitable[Any]], body: dict[str, Any]) -> None:
            where = (str(body.get("channel_id")), str(body.get("user_id")))
            item = slash(body, me, self._threads.get(where))
            if item is not None:
                await handed(item)
            await ack()

        async def on_action(ack: Callable[[], Awaitable[Any]], body: dict[str, Any]) -> None:
            item = press(body)
            if item is not None:
                await handed(item)
            await ack()

        app.event("message")(on_event)
        app.event("app_mention")(on_event)
        app.action({"type": "block_actions", "action_id": _ACTIONS})(on_action)
        for command in SLASH_COMMANDS:
            app.command(command)(on_command)
        await self._listen_with(app)
        log.info("slack channel: receiving as %s", me.user_id)
        try:
            while True:
                yield await queue.get()
        finally:
            await self.aclose()

    async def _listen_with(self, app: AsyncApp) -> None:
        if self._app_token is not None:
            self._handler = AsyncSocketModeHandler(app, self._app_token, logger=log)
            await self._handler.connect_async()  # type: ignore[no-untyped-call]
            log.info("slack channel: Socket Mode connected")
            return
        self._runner = web.AppRunner(app.web_app(path=EVENTS_PATH), access_log=None)
        await self._runner.setup()
        host, port = self._listen
        await web.TCPSite(self._runner, host, port).start()
        log.info("slack channel: Events API on http://%s:%d%s", host, port, EVENTS_PATH)

    # -- outbound -----------------------------------------------------------------------

    async def typing(self, chat: Chat, status: str = WORKING) -> None:
        if chat.thread is None:
            return
        await self._call(
            "assistant.threads.setStatus",
            lambda: self.client.assistant_threads_setStatus(
                channel_id=chat.id, thread_ts=chat.thread or "", status=status
            ),
        )

    async def draft(self, chat: Chat, draft_id: int, text: str) -> bool:
        return False  # Slack's native stream is a message: `slack_posting` records it

    async def post(self, chat: Chat, text: str, buttons: Sequence[Button] = ()) -> str:
        # tagged too (a refusal, a pairing code): only a stream's start is left unmarked
        return await self._post(chat, text, NOTICE, buttons)

    async def post_tagged(
        self, chat: Chat, text: str, tag: str, buttons: Sequence[Button] = ()
    ) -> str:
        """`post`, the tag in the message's metadata (`FindsPosts`)."""
        return await self._post(chat, text, tag, buttons)

    async def _post(self, chat: Chat, text: str, tag: str, buttons: Sequence[Button]) -> str:
        args: dict[str, Any] = {"channel": chat.id, "text": to_mrkdwn(text)}
        if chat.thread:
            args["thread_ts"] = chat.thread
        if buttons or len(args["text"]) <= SECTION_CHARS:
            args["blocks"] = blocks(text, buttons)
        args["metadata"] = metadata(tag)
        posted = await self._call("chat.postMessage", lambda: self.client.chat_postMessage(**args))
        return str(posted["ts"])

    async def edit(self, chat: Chat, ref: str, text: str, buttons: Sequence[Button] = ()) -> None:
        mrkdwn = to_mrkdwn(text)
        shown = blocks(text, buttons) if len(mrkdwn) <= SECTION_CHARS else []
        await self._call(
            "chat.update",
            lambda: self.client.chat_update(channel=chat.id, ts=ref, text=mrkdwn, blocks=shown),
        )

    async def answer_press(self, press: Press, text: str, *, alert: bool) -> None:
        if not alert:
            return  # the prompt itself is edited to say how it was answered
        channel, user, thread = press_target(press.ref)
        await self._call(
            "chat.postEphemeral",
            lambda: self.client.chat_postEphemeral(
                channel=channel, user=user, text=to_mrkdwn(text), thread_ts=thread
            ),
        )

    async def download(self, file: File, max_bytes: int) -> bytes:
        """A shared file from its `url_private_download`, the bot token as bearer (the
        `files:read` scope); the token goes only to Slack's own hosts (or the API URL's)."""
        if urlsplit(file.ref).hostname not in self._file_hosts:
            raise PlatformError("files.download", "untrusted_host")
        headers = {"Authorization": f"Bearer {self.client.token}"}
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session,
                session.get(file.ref, headers=headers, allow_redirects=False) as response,
            ):
                if response.status != 200:
                    code = f"http_{response.status}"
                    raise PlatformError("files.download", code, transient=response.status >= 500)
                if (response.content_length or 0) > max_bytes:
                    raise TooLarge(response.content_length or 0)
                data = bytearray()
                async for chunk in response.content.iter_chunked(64 * 1024):
                    data += chunk
                    if len(data) > max_bytes:
                        raise TooLarge(len(data))
                return bytes(data)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise PlatformError("files.download", type(exc).__name__, transient=True) from None

    async def find_tagged(self, chat: Chat, tag: str) -> str | None:
        """The ts of the post tagged `tag` in the chat's thread, if Slack has it: read back
        with `conversations.replies`, `include_all_metadata` (`FindsPosts`)."""
        for messages in await self._thread(chat):
            found = posted_with(messages, tag, (await self.me()).bot_id)
            if found is not None:
                return found
        return None

    async def find_unmarked(self, chat: Chat) -> tuple[str, str] | None:
        """`(ts, text)` of the bot's last message in the chat's thread that carries no
        metadata of the channel's: a native stream started and never recorded (every other
        post, and every stopped stream, carries its tag)."""
        me = await self.me()
        found: tuple[str, str] | None = None
        for messages in await self._thread(chat):
            for m in messages:
                marked = (m.get("metadata") or {}).get("event_type") == POSTED
                if m.get("bot_id") == me.bot_id and not marked:
                    found = (str(m["ts"]), str(m.get("text", "")))
        return found

    async def _thread(self, chat: Chat) -> list[list[dict[str, Any]]]:
        if chat.thread is None:
            return []
        pages, cursor = [], None
        while True:
            args: dict[str, Any] = {"channel": chat.id, "ts": chat.thread}
            if cursor:
                args["cursor"] = cursor
            page = await self._call(
                "conversations.replies",
                partial(self.client.conversations_replies, include_all_metadata=True, **args),
            )
            pages.append(list(page.get("messages") or []))
            cursor = (page.get("response_metadata") or {}).get("next_cursor")
            if not page.get("has_more") or not cursor:
                return pages

    # -- the native stream --------------------------------------------------------------

    async def stream_start(self, chat: Chat, text: str, recipient: str) -> str:
        """Start a native stream in the chat's thread showing `text`; its ts."""
        me = await self.me()
        stream = await self.client.chat_stream(
            channel=chat.id,
            thread_ts=chat.thread or "",
            recipient_team_id=me.team_id,
            recipient_user_id=recipient,
            buffer_size=1,  # the core paces the updates
        )
        await self._call("chat.startStream", lambda: stream.append(markdown_text=text))
        assert stream.ts is not None
        self._streams[stream.ts] = stream
        return stream.ts

    async def stream_append(self, chat: Chat, ts: str, text: str) -> None:
        stream = self._streams.get(ts)
        if stream is not None:
            await self._call("chat.appendStream", lambda: stream.append(markdown_text=text))
            return
        await self._call(
            "chat.appendStream",
            lambda: self.client.chat_appendStream(channel=chat.id, ts=ts, markdown_text=text),
        )

    async def stream_stop(self, chat: Chat, ts: str, text: str, tag: str) -> None:
        stream = self._streams.pop(ts, None)
        extra: dict[str, Any] = {"markdown_text": text} if text else {}
        if stream is not None:
            await self._call(
                "chat.stopStream", lambda: stream.stop(metadata=metadata(tag), **extra)
            )
            return
        await self._call(
            "chat.stopStream",
            lambda: self.client.chat_stopStream(
                channel=chat.id, ts=ts, metadata=metadata(tag), **extra
            ),
        )

    async def aclose(self) -> None:
        if self._handler is not None:
            await self._handler.close_async()  # type: ignore[no-untyped-call]
            self._handler = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _call(self, method: str, make: Callable[[], Awaitable[T]]) -> T:
        """`make()`, Slack's failures as the core's: a 429 `RateLimited`, an error
        `PlatformError` with Slack's code (transient for a 5xx or the network)."""
        try:
            return await make()
        except SlackApiError as exc:
            response = exc.response
            if response.status_code == 429:
                raise RateLimited(float(response.headers.get("Retry-After", 1))) from None
            code = str(response.get("error", f"http_{response.status_code}"))
            raise PlatformError(method, code, transient=response.status_code >= 500) from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise PlatformError(method, type(exc).__name__, transient=True) from None
