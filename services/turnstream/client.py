"""A small client for gateway authors, agents and the CLI: publish a command, follow its turn.

The outcome comes from the log (DESIGN §2): the turn's events carry the command's
`idempotencyKey` as their `correlationId`, and exactly one `TurnEnded` closes it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

import orjson
import uuid_utils

from turnstream.bus import Bus
from turnstream.bus.archive import read_archived
from turnstream.bus.errors import BusTimeout, NoResponders
from turnstream.bus.objects import put_new_attachment
from turnstream.bus.permissions import answered
from turnstream.core.events import (
    ATTACHMENT_PREFIX,
    Event,
    FailureClass,
    TurnEnded,
    TurnStatus,
    decode,
)
from turnstream.core.follow import Follow
from turnstream.core.session import SessionState, fold
from turnstream.core.subjects import REJECTED_SESSION, is_session_id

EventSink = Callable[[Event], Awaitable[None] | None]
DeltaSink = Callable[[str], Awaitable[None] | None]


@dataclass
class TurnOutcome:
    status: TurnStatus
    turn_id: str | None
    reply: str | None
    failure_class: FailureClass | None = None
    reason: str | None = None
    next_action: str | None = None
    events: list[Event] = field(default_factory=list)

    @property
    def completed(self) -> bool:
        return self.status == "completed"


def message_command(
    session_id: str,
    text: str,
    *,
    chat_id: str | None = None,
    sender_kind: str = "human",
    sender_id: str = "cli",
    idempotency_key: str | None = None,
    reply_to: str | None = None,
    kind: str = "message",
    agent: str | None = None,
) -> dict[str, Any]:
    """A well-formed inbound `message` (or `steer`) command; `agent` names the agent
    profile the session talks to (a `message` only)."""
    command = {
        "type": kind,
        "sessionId": session_id,
        "chatId": chat_id or session_id,
        "sender": {"kind": sender_kind, "id": sender_id},
        "text": text,
        "idempotencyKey": idempotency_key or str(uuid_utils.uuid7()),
        "replyTo": reply_to,
    }
    if agent is not None:
        command["agent"] = agent
    return command


def answer_command(
    session_id: str,
    interaction_id: str,
    decision: str,
    *,
    sender_kind: str = "human",
    sender_id: str = "cli",
    reason: str | None = None,
) -> dict[str, Any]:
    """An inbound `answer` to a pending approval prompt."""
    return {
        "type": "answer",
        "sessionId": session_id,
        "chatId": session_id,
        "sender": {"kind": sender_kind, "id": sender_id},
        "idempotencyKey": f"answer-{interaction_id}",
        "interactionId": interaction_id,
        "decision": decision,
        "reason": reason,
    }


async def live_state(bus: Bus, session_id: str, timeout: float = 5) -> bytes:
    """The turn-runner's live state of a session, as JSON (`state_from_json` reads it)."""
    subject = bus.subjects.api("turn-runner", "session")
    msg = await bus.nc.request(subject, orjson.dumps({"sessionId": session_id}), timeout=timeout)
    return bytes(msg.data)


class Replayed(NamedTuple):
    state: SessionState
    events: list[Event]
    last_seq: int
    """The log sequence of the last event folded (0: none)."""
    head_seq: int = 0
    """The session's last log sequence, folded or not (0: the session has no events)."""


async def replay_session(
    bus: Bus, session_id: str, *, at_seq: int | None = None, at_time: datetime | None = None
) -> Replayed:
    """A session rebuilt from the log (its archived part first, if it has one), as of now or
    of a sequence or time; nothing is called."""
    stored = [*await read_archived(bus, session_id), *await bus.store.read_session(session_id)]
    kept = [
        s
        for s in stored
        if (at_seq is None or s.seq <= at_seq) and (at_time is None or s.event.time <= at_time)
    ]
    events = [s.event for s in kept]
    last = kept[-1].seq if kept else 0
    head = stored[-1].seq if stored else 0
    return Replayed(fold(SessionState.of(session_id), events), events, last, head)


class NoAnswer(BusTimeout):
    """A request to a turnstream service (`ts.api.*`) that no instance answered in time."""

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what

    def __str__(self) -> str:
        return self.what


PENDING_QUIET_S = 0.2
"""How long the pending query waits for one more approval instance's reply after the last."""


async def pending_prompts(
    bus: Bus, session_id: str | None = None, *, timeout: float = 5.0, by_subject: bool = False
) -> list[dict[str, Any]]:
    """Open approval prompts, gathered from every approval instance (each lists those of the
    sessions it acts for): replies are collected until none came for `PENDING_QUIET_S`, and
    a prompt listed twice (by an instance that has just lost its session) is listed once.
    `by_subject`: one session's asked on `…pending.<session>`, which a NATS user can be
    granted by name (an approver of some sessions), not in the query's body."""
    subject = bus.subjects.api("approval", "pending")
    if by_subject and session_id:
        subject = f"{subject}.{session_id}"
    query = orjson.dumps({"sessionId": session_id} if session_id else {})
    replies: asyncio.Queue[Any] = asyncio.Queue()

    async def reply(msg: Any) -> None:
        replies.put_nowait(msg)

    inbox = bus.nc.new_inbox()
    sub = await bus.nc.subscribe(inbox, cb=reply)
    found: dict[str, dict[str, Any]] = {}
    try:
        await bus.nc.publish(subject, query, reply=inbox)
        answered = False
        while True:
            try:
                async with asyncio.timeout(PENDING_QUIET_S if answered else timeout):
                    msg = await replies.get()
            except TimeoutError:
                if not answered:
                    raise NoAnswer(f"no approval service answered in {timeout:g} s") from None
                return list(found.values())
            if msg.headers and msg.headers.get("Status") == "503":
                raise NoResponders
            body = orjson.loads(msg.data)
            if "error" in body:
                raise RuntimeError(f"approval service: {body['error']}")
            for prompt in body["pending"]:
                found.setdefault(prompt["interactionId"], prompt)
            answered = True
    finally:
        await sub.unsubscribe()


def attach_command(
    session_id: str,
    workflow: str,
    ctx: dict[str, Any] | None = None,
    *,
    sender_kind: str = "human",
    sender_id: str = "cli",
    idempotency_key: str | None = None,
) -> dict[str, Any]:
    """A well-formed inbound `attach` command (run a workflow on the session)."""
    return {
        "type": "attach",
        "sessionId": session_id,
        "chatId": session_id,
        "sender": {"kind": sender_kind, "id": sender_id},
        "workflow": workflow,
        "ctx": ctx or {},
        "idempotencyKey": idempotency_key or str(uuid_utils.uuid7()),
    }


def attachment(name: str, media_type: str, data: bytes, *, inline: bool = True) -> dict[str, Any]:
    """An attachment for a `message` command's `attachments`: its bytes inline (base64), or,
    with `inline=False`, named by hash (put them first with `store_attachment`)."""
    described: dict[str, Any] = {
        "name": name,
        "mediaType": media_type,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    if inline:
        described["data"] = base64.b64encode(data).decode()
    return described


async def store_attachment(bus: Bus, name: str, media_type: str, data: bytes) -> dict[str, Any]:
    """Put an attachment's bytes into the object store (`att/<sha256>`, once) and return
    it for a command's `attachments`, without its bytes: for files over the inline bound."""
    described = attachment(name, media_type, data, inline=False)
    await put_new_attachment(bus, ATTACHMENT_PREFIX + described["sha256"], data)
    return described


async def publish_command(
    bus: Bus,
    session_id: str,
    command: dict[str, Any] | bytes,
    idempotency_key: str | None = None,
    *,
    door: str | None = None,
) -> int:
    """Publish to the inbound stream; returns its sequence. Retries are deduplicated.
    `door`: through one of the session's doors (`ANSWER_DOOR`: an answer, as an approver
    may), else on `<prefix>.in.<session>`."""
    return int((await _publish(bus, session_id, command, idempotency_key, door)).seq)


async def _publish(
    bus: Bus,
    session_id: str,
    command: dict[str, Any] | bytes,
    idempotency_key: str | None = None,
    door: str | None = None,
) -> Any:
    if isinstance(command, dict):
        idempotency_key = idempotency_key or command.get("idempotencyKey")
        payload = orjson.dumps(command)
    else:
        payload = command
    headers = {"Nats-Msg-Id": idempotency_key} if idempotency_key else None
    subject = bus.subjects.inbound_through(session_id, door)
    return await bus.publish_permitted(subject, payload, headers=headers)


CATCH_UP_AFTER_S = 1.0
"""A publish that hears nothing for this long reads the log once: its key may have been
used before (the gateway drops a repeated idempotencyKey), and that turn's events, which
carry the key as their `correlationId`, may all be in the past."""


async def send_and_wait(
    bus: Bus,
    command: dict[str, Any],
    *,
    on_event: EventSink | None = None,
    on_delta: DeltaSink | None = None,
    timeout: float | None = 60.0,
) -> TurnOutcome:
    """Publish `command` and follow its turn until its `TurnEnded` is in the log (`timeout`
    None: no bound of its own; the caller bounds it).

    A message steered into a running turn (a `steer` command, or the `steer` follow-up
    policy) follows that turn instead, and hears back with its `TurnEnded`. A command whose
    idempotencyKey was used before (a retry) hears back from the first one's turn.

    `PermissionDenied` (nothing sent) when this NATS user may not read the session's log,
    or (sent by no one) may not publish to its inbound subject."""
    session_id, subjects = command["sessionId"], bus.subjects
    # input with an unusable session id is recorded under the reserved rejected session
    log_session = session_id if is_session_id(session_id) else REJECTED_SESSION
    following = _Following(bus, log_session, command["idempotencyKey"], on_event, on_delta)
    log_sub = await bus.nc.subscribe(subjects.log_session(log_session), cb=following.on_log)
    live_sub = await bus.nc.subscribe(subjects.live_session(log_session), cb=following.on_live)
    catching_up: asyncio.Task[None] | None = None
    try:
        await answered(bus.nc)
        denied = bus.refusals.denied("subscription", subjects.log_session(log_session))
        if denied is not None:
            raise denied  # not sent: its turn could not be followed
        ack = await _publish(bus, session_id, command)
        duplicate = bool(getattr(ack, "duplicate", False))
        catching_up = asyncio.create_task(following.catch_up(duplicate))
        async with asyncio.timeout(timeout):
            return await following.done
    finally:
        if catching_up is not None:
            catching_up.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await catching_up
        await log_sub.unsubscribe()
        await live_sub.unsubscribe()


class _Following:
    """One command followed to its `TurnEnded` (`core.follow.Follow`, by its idempotency
    key) from its session's log as it is appended, or read once when nothing comes
    (`catch_up`); its events to `on_event`, its turn's token deltas to `on_delta`."""

    def __init__(
        self,
        bus: Bus,
        log_session: str,
        key: str,
        on_event: EventSink | None,
        on_delta: DeltaSink | None,
    ) -> None:
        self.bus, self.log_session = bus, log_session
        self.on_event, self.on_delta = on_event, on_delta
        self.follow = Follow(None, key)
        self.done: asyncio.Future[TurnOutcome] = asyncio.get_running_loop().create_future()
        self.seen: list[Event] = []
        self.seen_ids: set[str] = set()

    async def event(self, event: Event, seq: int = 0) -> None:
        if event.id in self.seen_ids:  # live and caught up from the store alike
            return
        if not self.follow.feed(seq, event):
            return
        self.seen_ids.add(event.id)
        self.seen.append(event)
        await _call(self.on_event, event)
        ended = self.follow.ended
        if ended is not None and not self.done.done():
            assert isinstance(ended.event, TurnEnded)
            self.done.set_result(_outcome(ended.event, self.seen))

    async def on_log(self, msg: Any) -> None:
        await self.event(decode(msg.data))

    async def on_live(self, msg: Any) -> None:
        body = orjson.loads(msg.data)
        turn_id = self.follow.turn_id
        if turn_id is not None and body.get("turnId") == turn_id:
            await _call(self.on_delta, body["delta"])

    async def catch_up(self, duplicate: bool) -> None:
        if not duplicate:
            await asyncio.sleep(CATCH_UP_AFTER_S)
        if self.seen or self.done.done():
            return
        for stored in await self.bus.store.read_session(self.log_session):
            if self.done.done():
                return
            await self.event(stored.event, stored.seq)


def _outcome(ended: TurnEnded, events: list[Event]) -> TurnOutcome:
    data = ended.data
    return TurnOutcome(
        status=data.status,
        turn_id=ended.turn_id,
        reply=data.reply,
        failure_class=data.failure_class,
        reason=data.reason,
        next_action=data.next_action,
        events=events,
    )


async def _call(sink: Callable[[Any], Awaitable[None] | None] | None, value: Any) -> None:
    if sink is not None:
        result = sink(value)
        if asyncio.iscoroutine(result):
            await result
