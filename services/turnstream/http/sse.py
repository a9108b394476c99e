"""`GET /v1/sessions/{id}/stream`: a session's log as Server-Sent Events, replay then live.

`id:` is the event's TS_LOG sequence, `event:` its type, `data:` its JSON; token deltas of
the running turn come as `event: token` without an `id` (they are not in the log). A
client that reconnects sends `Last-Event-ID` (or `?after=`) and gets what follows it; the
stream's first frame is a `retry:` drawn at random for each stream (`Options.retry_ms`),
so the clients of a restarted server come back spread out, not in one burst.

The seam between replay and live, with no gap and no duplicate: the stream's hub feed is
registered *first* (from then on every new event is buffered), the log is read up to its
end *then*, and the buffer is drained skipping sequences the replay already sent. An event
appended before the feed existed is in the replay; one appended after is in the buffer.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.sse import format_sse_event
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from turnstream.http.context import HttpContext, SessionId, context
from turnstream.http.direct import LogRecord
from turnstream.http.hub import Closed, Feed
from turnstream.http.problems import invalid_input

router = APIRouter(prefix="/v1/sessions/{id}", tags=["stream"])
PING = format_sse_event(comment="ping")
CHUNK_BYTES = 64 * 1024
"""Replayed frames are sent in chunks of about this size."""
CATCH_UP_S = 5.0
"""How long a replay waits for a lagging replica before the stream fails (and is resumed)."""


def log_event(seq: int, event_type: str, data: bytes) -> bytes:
    return format_sse_event(data_str=data.decode(), event=event_type, id=str(seq))


class SSEResponse(StreamingResponse):
    """`text/event-stream` of frames made by FastAPI's SSE encoder (`format_sse_event`).

    Not FastAPI's generator endpoint: that runs two more tasks, two memory streams and a
    timer per event for each stream (its keepalive), which made 500 streams opened at
    once wait ~1 s for their first event; the stream below pings by itself."""

    media_type = "text/event-stream"

    def __init__(self, content: AsyncIterator[bytes]) -> None:
        # no-cache, and no buffering by an nginx in front (as FastAPI's SSE sets them)
        super().__init__(content, headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Starlette would run a task group with a second task listening for the client's
        # disconnect (uvicorn says ASGI 2.3); the stream learns of it at its next ping
        # instead (`events`), and a burst of streams opening costs a task group less each
        await self.stream_response(send)


async def replay(ctx: HttpContext, session_id: str, after: int) -> AsyncIterator[LogRecord]:
    """The session's events after `after` up to its last one now, page by page (the
    stream's feed is registered: whatever comes later is in the feed).

    A log of one replica answers direct gets from the one server that appends: a page
    that says "no more" is the end. On a cluster any replica may answer, a little behind,
    so "now" is the stream leader's answer (`STREAM.MSG.GET`), and a page that stops
    short of it is asked again."""
    bus, hub = ctx.bus, ctx.hub
    limit = ctx.options.replay_page
    if hub.log_replicas == 1:
        async for record in hub.direct.records(session_id, after=after, limit=limit):
            yield record
        return
    target = await bus.store.last_seq(session_id)
    deadline = time.monotonic() + CATCH_UP_S
    while after < target:
        page, more = await hub.direct.page(session_id, after=after, limit=limit)
        for record in page:
            yield record
        if page:
            after = page[-1].seq
        elif time.monotonic() > deadline:
            raise RuntimeError(
                f"replay of {session_id} stopped at {after}; the leader has {target}"
            )
        if not more and after < target:
            await asyncio.sleep(0.02)  # a replica behind the leader: it catches up


async def events(
    ctx: HttpContext, request: Request, feed: Feed, session_id: str, after: int
) -> AsyncIterator[bytes]:
    # the replay goes out in chunks, not a write per event (500 streams opened at once
    # each paid a socket write per frame), the `retry:` with its first
    chunk = [format_sse_event(retry=random.randint(*ctx.options.retry_ms))]
    size = 0
    last = after
    async for seq, event_type, data in replay(ctx, session_id, after):
        last = seq
        chunk.append(log_event(seq, event_type, data))
        size += len(chunk[-1])
        if size >= CHUNK_BYTES:
            yield b"".join(chunk)
            chunk, size = [], 0
    if chunk:
        yield b"".join(chunk)
    while True:
        try:
            item = await feed.get(ctx.options.ping_s)
        except Closed as closed:
            yield format_sse_event(comment=f"closed: {closed.reason}")
            return
        if item is None:
            if await request.is_disconnected():
                return
            yield PING
        elif isinstance(item, LogRecord):
            if item.seq > last:  # at the seam: sent by the replay already
                last = item.seq
                yield log_event(item.seq, item.event_type, item.data)
        else:
            yield format_sse_event(data_str=item.data.decode(), event="token")


async def stream_reader(
    request: Request,
    session: SessionId,
    ticket: Annotated[str | None, Query(description="From POST /v1/tickets (EventSource)")] = None,
) -> str:
    """Checks the caller before the stream starts (a generator's errors come too late
    for a status code): a key, or a ticket for this session."""
    ctx = await context(request)
    client = request.client.host if request.client else None
    who = ctx.auth.principal(request.headers.get("authorization"), client, ticket)
    request.state.principal = who.name
    who.require("read", session)
    return session


async def resume_after(
    after: Annotated[int | None, Query(ge=0, description="TS_LOG sequence to resume after")] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> int:
    return resume_seq(after or 0, last_event_id)


def resume_seq(after: int, last_event_id: str | None) -> int:
    """`Last-Event-ID` (a reconnecting EventSource) wins over `?after=`."""
    if last_event_id:
        if not last_event_id.strip().isdigit():
            raise invalid_input("Last-Event-ID must be a TS_LOG sequence (digits)")
        return int(last_event_id)
    return after


@router.get(
    "/stream",
    response_class=SSEResponse,
    status_code=200,
    summary="The session's events as SSE: replay after Last-Event-ID / ?after=, then live",
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def stream(
    request: Request,
    session: Annotated[str, Depends(stream_reader)],
    start: Annotated[int, Depends(resume_after)],
    tokens: Annotated[bool, Query(description="Also send token deltas (`event: token`)")] = True,
) -> SSEResponse:
    return await open_stream(await context(request), request, session, start, tokens)


async def open_stream(
    ctx: HttpContext, request: Request, session: str, after: int, tokens: bool
) -> SSEResponse:
    """The stream of a checked caller (the route's, and `fast.FastPaths`')."""
    # a 503 now, while a status code can still say it; and the live tokens followed before
    # the headers go out, so a client that starts a turn once the stream opened (an
    # EventSource's `onopen`) misses none of them
    await ctx.hub.start(tokens=tokens)

    async def body() -> AsyncIterator[bytes]:
        async with ctx.hub.feed(session, tokens=tokens) as feed:
            async for item in events(ctx, request, feed, session, after):
                yield item

    return SSEResponse(body())
