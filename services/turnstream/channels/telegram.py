"""The Telegram channel: `python -m turnstream.channels.telegram` (docs/channels.md).

On python-telegram-bot 22 (`pip install 'turnstream[telegram]'`), used as a Bot API client
only: its `Bot` has every method the channel needs (`sendMessageDraft` included), speaks
httpx like the rest of turnstream, takes its server from `base_url`
(TURNSTREAM_TELEGRAM_API_URL), and leaves the long-polling loop to us, which is what lets
the channel confirm an update to Telegram (the next `getUpdates` offset) only after its
command is stored. aiogram 3 would do as well, on aiohttp, a second HTTP stack.

Long polling: `getUpdates` with a timeout; an error reconnects after a backoff doubling
to `MAX_BACKOFF_S`. A message's identity (`update_id`, `message_id`) is its idempotencyKey.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging
import mimetypes
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, Message, Update
from telegram.constants import ChatAction, MessageEntityType, ParseMode
from telegram.error import (
    BadRequest,
    Conflict,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)
from telegram.request import HTTPXRequest

from turnstream.bus import Bus
from turnstream.channels.platform import (
    Button,
    Chat,
    Decision,
    Delivery,
    File,
    Incoming,
    Limits,
    PlatformError,
    Press,
    RateLimited,
    TooLarge,
)
from turnstream.channels.service import serve_channel
from turnstream.channels.telegram_html import to_html
from turnstream.channels.telegram_webhook import Webhook, deliveries
from turnstream.runtime.process import run_service
from turnstream.settings import Settings

log = logging.getLogger("turnstream.channels.telegram")
T = TypeVar("T")
TOKEN = "TURNSTREAM_TELEGRAM_BOT_TOKEN"
WEBHOOK_SECRET = "TURNSTREAM_TELEGRAM_WEBHOOK_SECRET"
POLL_TIMEOUT_S = 25
MAX_BACKOFF_S = 30.0
PRESS: dict[str, Decision] = {"a": "approve", "d": "deny", "s": "stop"}


def _seconds(exc: RetryAfter) -> float:
    with warnings.catch_warnings():  # PTB 22 deprecates the int form; both are read here
        warnings.simplefilter("ignore")
        value = exc.retry_after
    return value.total_seconds() if isinstance(value, dt.timedelta) else float(value)


class Telegram:
    """Telegram, as the channel core's `Platform`."""

    name = "telegram"
    limits = Limits(text=4096, default_scope="chat")

    def __init__(
        self,
        token: str,
        api_url: str,
        *,
        poll_timeout_s: int = POLL_TIMEOUT_S,
        webhook: Webhook | None = None,
    ) -> None:
        """Long polling, or with `webhook` Telegram POSTs updates to it."""
        base = api_url.rstrip("/")
        self.poll_timeout_s = poll_timeout_s
        self.webhook = webhook
        self.bot = Bot(
            token,
            base_url=f"{base}/bot",
            base_file_url=f"{base}/file/bot",
            request=HTTPXRequest(connection_pool_size=8, read_timeout=30.0),
            get_updates_request=HTTPXRequest(read_timeout=poll_timeout_s + 10.0),
        )
        self.me_id: int | None = None
        self.me_name = ""
        self.offset: int | None = None

    async def _api(self, method: str, make: Callable[[], Awaitable[T]]) -> T:
        """A Bot API call; its 429 as `RateLimited`, its error as `PlatformError` (the
        method and Telegram's error, never the URL, which holds the token)."""
        try:
            return await make()
        except RetryAfter as exc:
            raise RateLimited(_seconds(exc)) from None
        except TelegramError as exc:
            transient = isinstance(exc, NetworkError) and not isinstance(exc, BadRequest)
            raise PlatformError(
                method, type(exc).__name__, exc.message, transient=transient
            ) from None

    # inbound
    async def receive(self) -> AsyncIterator[Delivery]:
        if self.webhook is not None:
            await self._whoami()
            async for delivery in deliveries(self, self.webhook):
                yield delivery
            return
        backoff = 1.0
        while True:
            try:
                await self._whoami()
                updates = await self.bot.get_updates(
                    offset=self.offset,
                    timeout=self.poll_timeout_s,
                    allowed_updates=["message", "callback_query"],
                )
            except RetryAfter as exc:
                await asyncio.sleep(_seconds(exc))
                continue
            except (NetworkError, TimedOut, TelegramError) as exc:
                if isinstance(exc, Conflict):
                    log.warning(
                        "a webhook is set for this bot: getUpdates gets nothing until "
                        "it is deleted (deleteWebhook), or set TURNSTREAM_TELEGRAM_WEBHOOK_URL"
                    )
                log.warning("getUpdates failed (%s); again in %.0f s", type(exc).__name__, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            backoff = 1.0
            if not updates:
                continue
            items = [item for update in updates if (item := self.parse(update)) is not None]
            yield Delivery(items, self._confirming(updates[-1].update_id))

    async def _whoami(self) -> None:
        """Who the bot is (`getMe`, once), for mentions and its own messages."""
        backoff = 1.0
        while self.me_id is None:
            try:
                me = await self.bot.get_me()
            except TelegramError as exc:
                log.warning("getMe failed (%s); again in %.0f s", type(exc).__name__, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            self.me_id, self.me_name = me.id, (me.username or "").lower()
            log.info("connected as @%s", self.me_name)

    async def webhook_set(self, url: str, secret: str, allowed: list[str]) -> None:
        """`setWebhook` (again until Telegram takes it): updates go to `url` with `secret`."""
        backoff = 1.0
        while True:
            try:
                await self._api(
                    "setWebhook",
                    lambda: self.bot.set_webhook(url, secret_token=secret, allowed_updates=allowed),
                )
                return
            except (PlatformError, RateLimited) as exc:
                log.warning("setWebhook failed (%s); again in %.0f s", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _confirming(self, last: int) -> Callable[[], Awaitable[None]]:
        async def ack() -> None:  # Telegram forgets what is before the next offset
            self.offset = last + 1

        return ack

    def parse(self, update: Update) -> Incoming | Press | None:
        """The core's value for an update (None: nothing the channel takes)."""
        if update.callback_query is not None:
            return self._press(update)
        msg = update.message
        if msg is None or msg.from_user is None:
            return None
        files = _files(msg)
        if msg.text is None and not files:
            return None
        user = msg.from_user
        text = msg.text or msg.caption or ""
        if text.startswith("/"):  # `/stop@this_bot` → `/stop`
            word, _, rest = text.partition(" ")
            text = (word.split("@", 1)[0] + (" " + rest if rest else "")).strip()
        return Incoming(
            key=f"tg-{msg.chat.id}-{update.update_id}-{msg.message_id}",
            chat=self._chat(msg),
            user=str(user.id),
            user_name=user.full_name,
            text=text,
            from_bot=user.is_bot,
            from_self=user.id == self.me_id,
            mentions_bot=self._mentions(msg),
            files=files,
        )

    def _chat(self, msg: Message) -> Chat:
        topic = str(msg.message_thread_id) if msg.is_topic_message else None
        return Chat(str(msg.chat.id), msg.chat.type == "private", topic)

    def _mentions(self, msg: Message) -> bool:
        replied = msg.reply_to_message
        if replied is not None and replied.from_user is not None:
            if replied.from_user.id == self.me_id:
                return True
        entities = msg.parse_entities() if msg.text else msg.parse_caption_entities()
        for entity, value in entities.items():
            if entity.type == MessageEntityType.MENTION and value.lower() == f"@{self.me_name}":
                return True
            if entity.type == MessageEntityType.TEXT_MENTION and entity.user is not None:
                if entity.user.id == self.me_id:
                    return True
            if entity.type == MessageEntityType.BOT_COMMAND and value.lower().endswith(
                f"@{self.me_name}"
            ):
                return True
        return False

    def _press(self, update: Update) -> Press | None:
        query = update.callback_query
        if query is None or not isinstance(query.message, Message) or not query.data:
            return None
        kind, _, interaction_id = query.data.partition(":")
        if kind not in PRESS or not interaction_id:
            return None
        return Press(
            key=f"tg-{update.update_id}-{query.id}",
            chat=self._chat(query.message),
            user=str(query.from_user.id),
            user_name=query.from_user.full_name,
            interaction_id=interaction_id,
            decision=PRESS[kind],
            ref=query.id,
        )

    # outbound
    @staticmethod
    def _where(chat: Chat) -> dict[str, Any]:
        where: dict[str, Any] = {"chat_id": int(chat.id)}
        if chat.topic:
            where["message_thread_id"] = int(chat.topic)
        return where

    @staticmethod
    def _keyboard(buttons: Sequence[Button]) -> InlineKeyboardMarkup | None:
        if not buttons:
            return None
        row = [
            InlineKeyboardButton(b.label, callback_data=f"{b.decision[0]}:{b.interaction_id}")
            for b in buttons
        ]
        return InlineKeyboardMarkup([row])

    async def typing(self, chat: Chat) -> None:
        await self._api(
            "sendChatAction",
            lambda: self.bot.send_chat_action(action=ChatAction.TYPING, **self._where(chat)),
        )

    async def draft(self, chat: Chat, draft_id: int, text: str) -> bool:
        if not chat.private:
            return False
        await self._api(
            "sendMessageDraft",
            lambda: self.bot.send_message_draft(
                int(chat.id), draft_id, to_html(text), parse_mode=ParseMode.HTML
            ),
        )
        return True

    async def post(self, chat: Chat, text: str, buttons: Sequence[Button] = ()) -> str:
        async def send(formatted: bool) -> Message:
            return await self.bot.send_message(
                text=to_html(text) if formatted else text,
                parse_mode=ParseMode.HTML if formatted else None,
                reply_markup=self._keyboard(buttons),
                **self._where(chat),
            )

        try:
            sent = await self._api("sendMessage", lambda: send(True))
        except PlatformError as exc:
            if "entities" not in str(exc).lower():
                raise
            sent = await self._api("sendMessage", lambda: send(False))  # as plain text
        return str(sent.message_id)

    async def edit(self, chat: Chat, ref: str, text: str, buttons: Sequence[Button] = ()) -> None:
        async def change(formatted: bool) -> Any:
            return await self.bot.edit_message_text(
                to_html(text) if formatted else text,
                chat_id=int(chat.id),
                message_id=int(ref),
                parse_mode=ParseMode.HTML if formatted else None,
                reply_markup=self._keyboard(buttons),
            )

        for formatted in (True, False):
            try:
                await self._api("editMessageText", functools.partial(change, formatted))
                return
            except PlatformError as exc:
                said = str(exc).lower()
                if "not modified" in said:
                    return
                if not formatted or "entities" not in said:
                    raise  # else: Telegram could not read the HTML: as plain text

    async def answer_press(self, press: Press, text: str, *, alert: bool) -> None:
        await self._api(
            "answerCallbackQuery",
            lambda: self.bot.answer_callback_query(press.ref, text=text, show_alert=alert),
        )

    async def download(self, file: File, max_bytes: int) -> bytes:
        """`getFile`, then the file from its `file_path` (Telegram gives bots files up to
        20 MB; a larger one is refused by `getFile`)."""
        found = await self._api("getFile", lambda: self.bot.get_file(file.ref))
        if found.file_size is not None and found.file_size > max_bytes:
            raise TooLarge(found.file_size)
        data = await self._api("getFile", found.download_as_bytearray)
        return bytes(data)

    async def aclose(self) -> None:
        try:
            await self.bot.shutdown()
        except Exception:  # never initialized, or the server is gone: nothing to let go
            log.debug("telegram bot shutdown", exc_info=True)


def _files(msg: Message) -> tuple[File, ...]:
    """The photo (its largest size) or document a message carries."""
    if msg.photo:
        photo = msg.photo[-1]
        name = f"photo-{msg.message_id}.jpg"
        return (File(name, "image/jpeg", photo.file_size, photo.file_id),)
    doc = msg.document
    if doc is None:
        return ()
    name = doc.file_name or f"file-{msg.message_id}"
    media_type = doc.mime_type or mimetypes.guess_type(name)[0] or "application/octet-stream"
    return (File(name, media_type, doc.file_size, doc.file_id),)


async def serve(settings: Settings, stop: asyncio.Event, bus: Bus | None = None) -> None:
    """Run the Telegram channel until `stop` is set."""
    token = settings.secret(TOKEN)
    if not token:
        raise ValueError(
            f"{TOKEN} is not set: create a bot with @BotFather and set its token in the "
            "environment or the secrets file (docs/channels.md)"
        )
    if logging.getLogger().level > logging.DEBUG:  # httpx says each request at INFO
        logging.getLogger("httpx").setLevel(logging.WARNING)
    telegram = Telegram(token, settings.telegram_api_url, webhook=webhook_of(settings))
    await serve_channel(telegram, settings, stop, bus)


def webhook_of(settings: Settings) -> Webhook | None:
    """The webhook the settings ask for (TURNSTREAM_TELEGRAM_WEBHOOK_URL), None: long polling."""
    url = settings.telegram_webhook_url
    if not url:
        return None
    secret = settings.secret(WEBHOOK_SECRET)
    if not secret:
        raise ValueError(
            f"TURNSTREAM_TELEGRAM_WEBHOOK_URL is set and {WEBHOOK_SECRET} is not: Telegram "
            "must send a secret with every update (docs/channels.md)"
        )
    host, _, port = settings.telegram_webhook_addr.rpartition(":")
    path = urlsplit(url).path or "/"
    return Webhook(url, secret, (host or "127.0.0.1", int(port)), path)


def main() -> None:
    run_service("channel-telegram", serve)


if __name__ == "__main__":
    main()
