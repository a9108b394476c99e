"""The fake Slack's Events API over HTTP: what Socket Mode sends as envelopes, POSTed to the
app's request URL instead, signed as Slack signs (`X-Slack-Signature: v0=HMAC-SHA256(signing
secret, "v0:<timestamp>:<body>")`), an event as JSON and a press as a form with `payload`;
a request not answered 200 within the timeout is sent again with `X-Slack-Retry-Num` and
`X-Slack-Retry-Reason`."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any
from urllib.parse import urlencode

import aiohttp

JSON = dict[str, Any]


def signed(secret: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    """The headers Slack signs a request with."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    base = b"v0:" + stamp.encode() + b":" + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={digest}"}


async def post(
    url: str, secret: str, kind: str, payload: JSON, attempt: int, timeout: float
) -> int | None:
    """POST one delivery; its HTTP status (None: no answer in time)."""
    if kind == "events_api":
        body, content_type = json.dumps(payload).encode(), "application/json"
    else:
        body = urlencode({"payload": json.dumps(payload)}).encode()
        content_type = "application/x-www-form-urlencoded"
    headers = {"Content-Type": content_type, **signed(secret, body)}
    if attempt:
        headers |= {"X-Slack-Retry-Num": str(attempt), "X-Slack-Retry-Reason": "http_timeout"}
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
            session.post(url, data=body, headers=headers) as response,
        ):
            await response.read()
            return response.status
    except (TimeoutError, aiohttp.ClientError):
        return None
