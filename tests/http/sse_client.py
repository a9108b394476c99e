"""A small SSE reader for tests: what a browser's EventSource would see, line by line."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import orjson


@dataclass
class Sse:
    event: str | None = None
    id: str | None = None
    data: str = ""
    comments: list[str] = field(default_factory=list)

    @property
    def json(self) -> dict:  # type: ignore[type-arg]
        return orjson.loads(self.data)


async def read_sse(
    response: httpx.Response, opened: asyncio.Event | None = None
) -> AsyncIterator[Sse]:
    """Each dispatched event; a comment-only block comes as an `Sse` with comments only.
    `opened` is set at the first line (the `retry:`), which the server writes once the
    stream's live feed is subscribed: a test that publishes after it misses nothing."""
    current = Sse()
    data: list[str] = []
    async for line in response.aiter_lines():
        if opened is not None:
            opened.set()
        if line == "":
            current.data = "\n".join(data)
            if data or current.comments or current.event:
                yield current
            current, data = Sse(), []
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "":
            current.comments.append(value)
        elif name == "event":
            current.event = value
        elif name == "id":
            current.id = value
        elif name == "data":
            data.append(value)
