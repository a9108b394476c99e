"""Publish one inbound command and follow it in the log: the gateway's verdict, and with
`wait` the turn's `TurnEnded`. The shell of `core.follow.Follow`; every POST route ends here."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
from pydantic import ValidationError
from starlette.responses import JSONResponse, Response

from turnstream.bus.errors import JetStreamError
from turnstream.bus.full import ALARM, noted
from turnstream.core.commands import COMMAND_ADAPTER
from turnstream.core.events import FailureClass, InputRejected, InteractionRequested, decode
from turnstream.core.follow import FOLLOWED_TYPES, Follow, Seen
from turnstream.http.context import HttpContext
from turnstream.http.direct import LogRecord
from turnstream.http.hub import Feed
from turnstream.http.problems import Problem, invalid_input
from turnstream.http.storage import full_problem


def checked(command: dict[str, Any], max_bytes: int) -> bytes:
    """The command's wire bytes, if the contract takes it (else the problem the gateway's
    rejection would have been, answered at once and nothing published)."""
    try:
        COMMAND_ADAPTER.validate_python(command)
    except ValidationError as exc:
        errors = [
            f"{'.'.join(str(p) for p in e['loc'][1:]) or '(root)'}: {e['msg']}"
            for e in exc.errors(include_url=False)
        ]
        raise invalid_input(
            f"command does not match the '{command.get('type')}' schema: {errors[0]}", errors
        ) from None
    payload = orjson.dumps(command)
    if len(payload) > max_bytes:
        raise Problem(
            413,
            "oversize",
            "Content too large",
            f"the command is {len(payload)} bytes; the limit is {max_bytes} "
            "(TURNSTREAM_MAX_INPUT_BYTES)",
            failure_class=FailureClass.INVALID_INPUT,
        )
    return payload


class Reader:
    """Feeds `follow` from the hub's feed, skipping what a log read already gave it, and
    decoding only the kinds `Follow` looks at (a turn's other events cost nothing)."""

    def __init__(self, follow: Follow, feed: Feed) -> None:
        self.follow = follow
        self.feed = feed
        self.last = 0
        self.ended_bytes = b""

    def take(self, seq: int, event_type: str, data: bytes) -> None:
        if seq > self.last:
            self.last = seq
            if event_type in FOLLOWED_TYPES:
                ended = self.follow.ended
                self.follow.feed(seq, decode(data))
                if self.follow.ended is not ended:
                    self.ended_bytes = data

    async def until(self, done: Any, deadline: float) -> bool:
        """Take the feed's items until `done()` (True) or `deadline` (monotonic; False).
        One timer for the whole wait, not one per item (a turn brings a dozen)."""
        if done():
            return True
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout_at(loop.time() + deadline - time.monotonic()):
                while not done():
                    item = await self.feed.get()
                    if isinstance(item, LogRecord):
                        self.take(item.seq, item.event_type, item.data)
        except TimeoutError:
            return bool(done())
        return True


async def publish(
    ctx: HttpContext, session_id: str, command: dict[str, Any], feed: Feed
) -> tuple[Follow, Reader, bool]:
    """Publish `command` (checked) and wait for the gateway's verdict on it, read from
    `feed` (opened before: nothing can slip past). Returns the follow, the reader that fed
    it (at `reader.last`), and whether the command was a duplicate."""
    payload = checked(command, ctx.settings.max_input_bytes)
    key: str = command["idempotencyKey"]
    bus = ctx.bus
    await ctx.storage.refuse_when_full(key)
    try:
        ack = await bus.publish(
            bus.subjects.inbound(session_id), payload, headers={"Nats-Msg-Id": key}
        )
    except JetStreamError as exc:
        if not noted(exc, bus.subjects.inbound(session_id)):
            raise
        raise full_problem(
            f"JetStream refused the command for want of storage ({exc.description}); nothing "
            "was stored: send it again once the operator has freed space",
            key,
        ) from exc
    if ALARM.runs:  # refusals were seen: this publish may end them
        ALARM.stored(bus.subjects.inbound(session_id))
    follow = Follow(int(ack.seq))
    reader = Reader(follow, feed)
    if ack.duplicate:  # a retry: its outcome may be in the log already
        async for record in ctx.hub.direct.records(session_id, after=0):
            reader.take(*record)
    deadline = time.monotonic() + ctx.options.accept_timeout_s
    if not await reader.until(lambda: follow.decided, deadline):
        await _stored_while_full(ctx, key, int(ack.seq))
        raise Problem(
            504,
            "timeout",
            "Gateway timeout",
            f"the command is stored (inbound seq {ack.seq}) but no gateway recorded a "
            f"verdict within {ctx.options.accept_timeout_s:g} s; is the gateway running?",
            failure_class=FailureClass.TIMEOUT,
            idempotencyKey=key,
            inboundSeq=int(ack.seq),
        )
    return follow, reader, bool(ack.duplicate)


async def _stored_while_full(ctx: HttpContext, key: str, seq: int) -> None:
    """No verdict in time because the log filled up after the command was stored: a 503
    `storage-full` saying so (the gateway holds the command until space is freed), rather
    than a 504 that blames the gateway."""
    try:
        usage = await ctx.storage.read()
    except Exception:  # not known: the 504 stands
        return
    if not usage["full"]:
        return
    raise full_problem(
        f"the command is stored (inbound seq {seq}), but the log is full "
        f"({', '.join(usage['atLimit']) or 'appends refused'} at its limit): it runs once "
        "the operator has freed space (docs/operations.md, 'The log full')",
        key,
        inboundSeq=seq,
    )


async def submit(
    ctx: HttpContext, session_id: str, command: dict[str, Any], *, wait_s: float | None = None
) -> Response:
    """Publish `command`; answer 202 with its verdict (or, when `wait_s` is given, 200 with
    `TurnEnded`, or 202 `{status: waiting, …}` as soon as the turn waits on a person), 422
    with a rejection, 504 when the wait runs out."""
    key: str = command["idempotencyKey"]
    # the feed before publishing (nothing can slip past), of the kinds `Follow` reads
    async with ctx.hub.feed(session_id, kinds=FOLLOWED_TYPES) as feed:
        start = time.monotonic()
        follow, reader, duplicate = await publish(ctx, session_id, command, feed)
        if follow.rejected is not None:
            raise rejection(follow.rejected, key)
        accepted = follow.accepted
        assert accepted is not None
        if wait_s is None:
            return JSONResponse(
                {
                    "turnId": follow.turn_id,
                    "idempotencyKey": key,
                    "seq": accepted.seq,
                    "event": accepted.event.type,
                    "duplicate": duplicate,
                },
                status_code=202,
            )
        if not await reader.until(lambda: follow.ended or follow.waiting, start + wait_s):
            raise Problem(
                504,
                "timeout",
                "Turn still running",
                f"turn {follow.turn_id} did not end within {wait_s:g} s; follow it on "
                f"/v1/sessions/{session_id}/stream?after={accepted.seq}",
                failure_class=FailureClass.TIMEOUT,
                turnId=follow.turn_id,
                idempotencyKey=key,
                seq=accepted.seq,
            )
    if follow.ended is None and follow.waiting is not None:
        return waiting_on_a_person(session_id, key, follow.waiting)
    return Response(reader.ended_bytes, media_type="application/json")


def waiting_on_a_person(session_id: str, key: str, seen: Seen) -> Response:
    """`wait`'s answer when the turn waits on an approval: what for and how to answer."""
    event = seen.event
    assert isinstance(event, InteractionRequested)
    d = event.data
    return JSONResponse(
        {
            "status": "waiting",
            "turnId": event.turn_id,
            "idempotencyKey": key,
            "seq": seen.seq,
            "interactionId": d.interaction_id,
            "tool": d.tool,
            "args": d.args,
            "prompt": d.prompt,
            "deadline": d.deadline.isoformat(),
            "answer": {
                "method": "POST",
                "path": f"/v1/sessions/{session_id}/answers/{d.interaction_id}",
                "body": {"decision": "approve"},
                "or": {"decision": "deny", "reason": "…"},
            },
            "stream": f"/v1/sessions/{session_id}/stream?after={seen.seq}",
        },
        status_code=202,
    )


def rejection(seen: Seen, key: str) -> Problem:
    event = seen.event
    assert isinstance(event, InputRejected)
    data = event.data
    return invalid_input(
        data.reason,
        data.errors or None,
        rejection=data.kind,
        turnId=event.turn_id,
        idempotencyKey=key,
        seq=seen.seq,
    )


def wait_bounded(ctx: HttpContext, timeout: float | None) -> float:
    """The wait `?timeout=` asks for, within the server's bounds."""
    chosen = ctx.options.wait_default_s if timeout is None else timeout
    return max(0.0, min(chosen, ctx.options.wait_max_s))
