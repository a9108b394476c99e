"""A client's A2A message as the command it stands for, published, with the task it
belongs to: no `taskId` is a `message` (a new turn), the `taskId` of an `input-required`
task an `answer` to its prompt, of a `working` task a `steer`.

The message's `messageId` is the command's idempotency key, and the context it first ran
in is remembered by that id (`TaskStore.claim_message`): a retry is published to the same
session even without its `contextId`, so the inbound stream recognises the duplicate and
the retry is answered with the first message's task. A retried reply to a task (an answer,
a steer) that ended meanwhile is answered with the task, not refused as late.
"""

from __future__ import annotations

from typing import Any

import uuid_utils
from a2a.types.a2a_pb2 import AgentCard, Message
from a2a.utils.errors import ContentTypeNotSupportedError, InvalidParamsError
from a2a.utils.input_mode_validator import validate_input_modes
from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]

from turnstream.core.follow import Follow
from turnstream.core.subjects import is_reserved_session, is_session_id
from turnstream.http.a2a.access import a2a_error, require
from turnstream.http.a2a.card import input_modes
from turnstream.http.a2a.files import attachments_of, without_bytes
from turnstream.http.a2a.mapping import decision, text_of
from turnstream.http.a2a.store import TaskRecord
from turnstream.http.a2a.tasks import Tasks
from turnstream.http.a2a.view import TurnView
from turnstream.http.auth import Principal
from turnstream.http.hub import Feed
from turnstream.http.problems import Problem
from turnstream.http.submit import publish
from turnstream.settings import Settings

READ_PARTS = ("text", "data")
"""The parts a reply to a task reads (their text, or a decision)."""
NEW_TURN_PARTS = (*READ_PARTS, "raw", "url")
"""A new turn's: files too (`files.attachments_of`)."""


def check_parts(message: Message, settings: Settings) -> None:
    """`ContentTypeNotSupportedError` for a part the agent does not take: a media type
    outside the card's input modes, or a file in a reply to a task; `InvalidParamsError`
    for no part at all."""
    validate_input_modes(message, AgentCard(default_input_modes=input_modes(settings)))
    taken = READ_PARTS if message.task_id else NEW_TURN_PARTS
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind not in taken:
            raise ContentTypeNotSupportedError(
                message=f"a {kind} part{f' ({part.media_type})' if part.media_type else ''} "
                "is not supported in a reply to a task: send text or data parts (files "
                "start a turn: send them without taskId)"
            )
    if not message.parts:
        raise InvalidParamsError(message="the message has no parts: send a text part")


async def command(tasks: Tasks, session: str, body: dict[str, Any], feed: Feed) -> Follow:
    """Publish `body` to `session` and wait for the gateway's verdict (a rejection and a
    timeout as A2A errors)."""
    try:
        follow, _, _ = await publish(tasks.ctx, session, body, feed)
    except Problem as problem:
        raise a2a_error(problem) from None
    if follow.rejected is not None:
        event = follow.rejected.event
        raise InvalidParamsError(
            message=f"rejected: {getattr(event.data, 'reason', '')}",
            data={"turnId": event.turn_id, "seq": follow.rejected.seq},
        )
    return follow


class Started:
    """`async with`: the message published as the right command, the task's record and
    its session's feed (opened before publishing) for following it."""

    def __init__(self, tasks: Tasks, message: Message, who: Principal, tokens: bool) -> None:
        self.tasks = tasks
        self.message = message
        self.who = who
        self.tokens = tokens
        self._feed_cm: Any = None

    async def __aenter__(self) -> tuple[TaskRecord, Feed]:
        tasks, message, who = self.tasks, self.message, self.who
        check_parts(message, tasks.ctx.settings)
        record: TaskRecord | None = None
        first = True
        if message.task_id:
            record = await tasks.load(message.task_id, who)
            session = record.view.session_id
            if message.context_id and message.context_id != session:
                raise InvalidParamsError(
                    message=f"task {message.task_id} belongs to context {session}"
                )
            if message.message_id:
                _, first = await tasks.store.claim_message(message.message_id, session)
        else:
            session = message.context_id or f"a2a-{uuid_utils.uuid7()}"
            if not is_session_id(session) or is_reserved_session(session):
                raise InvalidParamsError(
                    message=f"contextId {session!r} must be 1-128 of [A-Za-z0-9_:-]"
                )
            require(who, "send", session)
            if message.message_id:  # a retry goes where the first one went
                session, _ = await tasks.store.claim_message(message.message_id, session)
        key = message.message_id or str(uuid_utils.uuid7())
        base = {
            "sessionId": session,
            "chatId": session,
            "sender": {"kind": "agent", "id": f"a2a:{who.name}"},
            "idempotencyKey": f"a2a-{key}",
        }
        sent = without_bytes(MessageToDict(message))
        sent.update(contextId=session)
        self._feed_cm = tasks.ctx.hub.feed(session, tokens=self.tokens)
        feed = await self._feed_cm.__aenter__()
        try:
            if record is None:
                record = await self._new_turn(session, base, sent, feed)
            else:
                await self._reply(record, base, sent, feed, first=first)
        except BaseException:
            await self._feed_cm.__aexit__(None, None, None)
            raise
        return record, feed

    async def _new_turn(
        self, session: str, base: dict[str, Any], sent: dict[str, Any], feed: Feed
    ) -> TaskRecord:
        tasks, who = self.tasks, self.who
        require(who, "send", session)
        files = await attachments_of(self.message, tasks.ctx)
        text = text_of(self.message) or "(sent: " + ", ".join(f["name"] for f in files) + ")"
        body = {"type": "message", **base, "text": text}
        if files:
            body["attachments"] = files
        follow = await command(tasks, session, body, feed)
        turn = follow.turn_id
        assert turn is not None  # accepted: it names its turn
        sent.update(taskId=turn)
        existing = await tasks.store.get(turn)
        if existing is not None:  # a retried message: the task exists already
            await tasks.catch_up(existing)
            return existing
        # the turn's events start at its InputAccepted: read from there (exact, whatever
        # the feed saw), not from the session's first event
        start = follow.accepted.seq - 1 if follow.accepted else 0
        record = TaskRecord(TurnView(turn, session, last_seq=start), [sent], owner=who.name)
        await tasks.catch_up(record)
        await tasks.store.put(record)
        return record

    async def _reply(
        self,
        record: TaskRecord,
        base: dict[str, Any],
        sent: dict[str, Any],
        feed: Feed,
        *,
        first: bool,
    ) -> None:
        tasks, who, view = self.tasks, self.who, record.view
        session = view.session_id
        if view.terminal and not first:
            return  # a retried reply that took effect: the task as it is now answers it
        if view.terminal:
            raise InvalidParamsError(
                message=f"task {view.turn_id} is {view.state}; send a message without "
                "taskId (same contextId) to start the next turn"
            )
        if view.state == "input-required" and view.interaction is not None:
            require(who, "approve", session)
            answer, reason = decision(self.message)
            body = {
                "type": "answer",
                **base,
                "interactionId": view.interaction["interactionId"],
                "decision": answer,
                **({"reason": reason} if reason else {}),
            }
        else:
            require(who, "send", session)
            body = {"type": "steer", **base, "text": text_of(self.message)}
        await command(tasks, session, body, feed)
        record.messages.append(sent)
        await tasks.catch_up(record)
        await tasks.store.put(record)

    async def __aexit__(self, *exc: object) -> None:
        await self._feed_cm.__aexit__(None, None, None)
