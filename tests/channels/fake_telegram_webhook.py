"""Telegram's side of a webhook: an update POSTed as JSON to the URL `setWebhook` named,
with the `secret_token` it named in `X-Telegram-Bot-Api-Secret-Token` (or, as an attacker,
without it or with another); Telegram sends an update again until it is answered 2xx."""

from __future__ import annotations

from typing import Any

import aiohttp

HEADER = "X-Telegram-Bot-Api-Secret-Token"


async def post_update(
    url: str, update: dict[str, Any], secret: str | None, timeout: float = 60
) -> int:
    """POST `update` (with `update_id`) to `url`; the HTTP status answered."""
    headers = {HEADER: secret} if secret is not None else {}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
        session.post(url, json=update, headers=headers) as response,
    ):
        await response.read()
        return response.status
