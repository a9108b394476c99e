"""The Telegram channel's webhook mode (TURNSTREAM_TELEGRAM_WEBHOOK_URL): Telegram POSTs each
update to a URL of ours instead of the channel polling `getUpdates` (docs/channels.md).

A small aiohttp handler, not python-telegram-bot's own webhook server: PTB's `Updater`
answers Telegram 200 as soon as an update is queued, before anything stored it, and this
channel answers only once the update's command is stored (PubAck from the inbound stream),
as it confirms a polled update only then: an update whose command was not stored is
answered 503 and Telegram sends it again. aiohttp is what Slack's HTTP mode serves on, too.

    POST <path>  ──► no or another X-Telegram-Bot-Api-Secret-Token ──► 401, not read further
                 ──► not an update ───────────────────────────────────► 400
                 ──► nothing the channel takes ───────────────────────► 200
                 ──► the core stores its command ─────────────────────► 200
                 ──► not stored within STORE_WAIT_S ──────────────────► 503 (sent again)

The secret is compared in constant time. A re-sent update has the same identity
(`update_id`, `message_id`: the idempotencyKey), so it is one turn, as with polling.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web
from telegram import Bot, Update

from turnstream.channels.platform import Delivery, Incoming, Press

log = logging.getLogger("turnstream.channels.telegram")
HEADER = "X-Telegram-Bot-Api-Secret-Token"
STORE_WAIT_S = 30.0
"""How long a request waits for its command to be stored before it is answered 503."""
SECRET = re.compile(r"^[A-Za-z0-9_-]{1,256}$")
"""What Telegram takes as a webhook's `secret_token`."""
ALLOWED_UPDATES = ["message", "callback_query"]


@dataclass(frozen=True)
class Webhook:
    """Where Telegram sends updates (`url`, public, HTTPS), the secret it sends with each,
    and where our server listens (behind the HTTPS endpoint)."""

    url: str
    secret: str
    listen: tuple[str, int]
    path: str

    def __post_init__(self) -> None:
        if not SECRET.match(self.secret):
            raise ValueError(
                "TURNSTREAM_TELEGRAM_WEBHOOK_SECRET must be 1-256 characters of A-Z, a-z, "
                "0-9, _ and - (Telegram's secret_token)"
            )


class Telegram(Protocol):
    """What the webhook needs of the channel's Telegram platform (`channels.telegram`)."""

    bot: Bot

    def parse(self, update: Update) -> Incoming | Press | None: ...

    async def webhook_set(self, url: str, secret: str, allowed: list[str]) -> None: ...


async def deliveries(telegram: Telegram, hook: Webhook) -> AsyncIterator[Delivery]:
    """Updates as Telegram POSTs them to `hook`, each acknowledged (answered 200) only in
    its `Delivery.ack`; the server runs and the webhook is set until the caller stops."""
    queue: asyncio.Queue[Delivery] = asyncio.Queue()

    async def take(request: web.Request) -> web.Response:
        given = request.headers.get(HEADER, "")
        if not hmac.compare_digest(given.encode(), hook.secret.encode()):
            log.warning("a webhook request without the secret token refused (%s)", request.remote)
            return web.Response(status=401)
        try:
            update = Update.de_json(await request.json(), telegram.bot)
        except Exception:
            return web.Response(status=400)
        item = telegram.parse(update)
        if item is None:
            return web.Response()
        stored = asyncio.Event()

        async def ack() -> None:
            stored.set()

        await queue.put(Delivery([item], ack))
        try:
            async with asyncio.timeout(STORE_WAIT_S):
                await stored.wait()
        except TimeoutError:
            return web.Response(status=503)  # not stored: Telegram sends it again
        return web.Response()

    app = web.Application(client_max_size=1024 * 1024)
    app.router.add_post(hook.path, take)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        host, port = hook.listen
        await web.TCPSite(runner, host, port).start()
        await telegram.webhook_set(hook.url, hook.secret, ALLOWED_UPDATES)
        log.info(
            "webhook: Telegram posts to %s, served on %s:%d%s", hook.url, host, port, hook.path
        )
        while True:
            yield await queue.get()
    finally:
        await runner.cleanup()
