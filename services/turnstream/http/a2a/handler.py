"""The A2A request handler: A2A methods as inbound commands and reads of the log.

- `contextId` is the session (a new `a2a-<uuid>` when the client sends none), `taskId` the
  turn (the `turnId` of the message's `InputAccepted`).
- `SendMessage` / `SendStreamingMessage` without `taskId`: a `message` command; it waits
  (or streams) until the turn ends or asks for approval (`input-required`).
- … with the `taskId` of an `input-required` task: an `answer` to its prompt, `approve` /
  `deny` as text or a data part `{"decision", "reason"}`; of a `working` task: a `steer`.
- `GetTask` / `SubscribeToTask`: the task's entry in KV, folded forward from the log.
- `CancelTask`: a hard `interrupt`.

Every method checks the caller's key against the task's session (scopes `send`, `read`,
`approve`, as the REST routes do). The message's `messageId` is the command's idempotency
key, so a client's retry is one turn.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Protocol

import uuid_utils
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types.a2a_pb2 import (
    AgentCard,
    Artifact,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    Part,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatusUpdateEvent,
)
from a2a.utils.constants import DEFAULT_LIST_TASKS_PAGE_SIZE, MAX_LIST_TASKS_PAGE_SIZE
from a2a.utils.errors import (
    ExtendedAgentCardNotConfiguredError,
    InvalidParamsError,
    InvalidRequestError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]

from turnstream.core.events import decode
from turnstream.core.subjects import is_reserved_session, is_session_id
from turnstream.http.a2a.mapping import STATES, decision, text_of, to_task, token_text
from turnstream.http.a2a.store import TaskRecord, TaskStore
from turnstream.http.a2a.view import ACTED_ON, PAUSED, TERMINAL, TurnView
from turnstream.http.auth import Principal, Scope
from turnstream.http.context import HttpContext
from turnstream.http.hub import Closed, Feed, TokenItem
from turnstream.http.problems import Problem
from turnstream.http.submit import publish

PRINCIPAL = "turnstream.principal"
"""Where the route puts the caller (`ServerCallContext.state`)."""


class ContextSource(Protocol):
    def __call__(self) -> HttpContext: ...


def _a2a_error(problem: Problem) -> Exception:
    data = {"status": problem.status, "type": problem.slug, **problem.extra}
    if problem.status == 504:
        return UnsupportedOperationError(message=problem.detail, data=data)
    return InvalidParamsError(message=problem.detail, data=data)


class Handler(RequestHandler):
    """One per app; reads the bus and hub from the app's context at each call."""

    def __init__(self, context: ContextSource) -> None:
        self._context = context
        self._store: TaskStore | None = None

    @property
    def ctx(self) -> HttpContext:
        return self._context()

    @property
    def store(self) -> TaskStore:
        if self._store is None:
            self._store = TaskStore(self.ctx.bus)
        return self._store

    # ---- reads
    async def load(self, task_id: str, who: Principal, scope: Scope = "read") -> TaskRecord:
        """The task's record, folded up to the end of the log now (and saved if it moved)."""
        record = await self.store.get(task_id)
        if record is None:
            raise TaskNotFoundError(message=f"no task {task_id!r}")
        _require(who, scope, record.view.session_id)
        await self._catch_up(record)
        return record

    async def _catch_up(self, record: TaskRecord) -> None:
        view = record.view
        before = view.last_seq
        async for seq, event_type, data in self.ctx.hub.direct.records(
            view.session_id, after=view.last_seq
        ):
            if event_type in ACTED_ON:
                view.feed(seq, decode(data))
            else:
                view.last_seq = max(view.last_seq, seq)
        if view.last_seq != before:
            await self.store.put(record)

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task:
        record = await self.load(params.id, _who(context))
        length = params.history_length if params.HasField("history_length") else None
        return to_task(record, length)

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        """The caller's tasks (sessions its key may read), newest first (task ids are
        UUIDv7), of one context or status if asked; each on the page folded to now."""
        who = _who(context)
        if params.context_id:
            _require(who, "read", params.context_id)
        elif not who.allows("read"):
            _require(who, "read", "*")
        records = [
            r
            for r in await self.store.all()
            if who.allows("read", r.view.session_id)
            and (not params.context_id or r.view.session_id == params.context_id)
        ]
        by_status = params.status != TaskState.TASK_STATE_UNSPECIFIED
        for record in records if by_status else []:
            await self._catch_up(record)  # a filter on status needs the status now
        if by_status:
            records = [r for r in records if STATES[r.view.state] == params.status]
        records.sort(key=lambda r: r.view.turn_id, reverse=True)
        if params.page_token:
            records = [r for r in records if r.view.turn_id < params.page_token]
        size = min(params.page_size or DEFAULT_LIST_TASKS_PAGE_SIZE, MAX_LIST_TASKS_PAGE_SIZE)
        page = records[:size]
        for record in page if not by_status else []:
            await self._catch_up(record)
        length = params.history_length if params.HasField("history_length") else None
        tasks = [to_task(r, length) for r in page]
        if not params.include_artifacts:
            for task in tasks:
                del task.artifacts[:]
        return ListTasksResponse(
            tasks=tasks,
            next_page_token=page[-1].view.turn_id if len(records) > size else "",
            page_size=size,
            total_size=len(records),
        )

    # ---- commands
    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        who = _who(context)
        blocking = not params.configuration.return_immediately
        async with self._started(params.message, who) as (record, feed):
            if blocking and record.view.state not in PAUSED:
                deadline = time.monotonic() + self.ctx.options.wait_default_s
                async for _ in self._follow(record, feed, deadline):
                    pass  # the end (or a prompt) is what counts
        length = (
            params.configuration.history_length
            if params.configuration.HasField("history_length")
            else None
        )
        return to_task(record, length)

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Any]:
        who = _who(context)
        async with self._started(params.message, who, tokens=True) as (record, feed):
            yield to_task(record)
            if record.view.state in PAUSED:
                return
            async for event in self._stream(record, feed, PAUSED):
                yield event

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Any]:
        who = _who(context)
        record = await self.store.get(params.id)
        if record is None:
            raise TaskNotFoundError(message=f"no task {params.id!r}")
        _require(who, "read", record.view.session_id)
        async with self.ctx.hub.feed(record.view.session_id, tokens=True) as feed:
            await self._catch_up(record)  # after the feed: nothing slips between the two
            if record.view.terminal:
                raise UnsupportedOperationError(
                    message=f"task {params.id} is {record.view.state}: nothing to subscribe to"
                )
            yield to_task(record)
            # a subscriber watches the task to its end, through any prompts on the way
            async for event in self._stream(record, feed, TERMINAL):
                yield event

    async def on_cancel_task(
        self, params: CancelTaskRequest, context: ServerCallContext
    ) -> Task | None:
        who = _who(context)
        record = await self.load(params.id, who, "send")
        view = record.view
        if view.terminal:
            raise TaskNotCancelableError(message=f"task {params.id} is {view.state} already")
        command = {
            "type": "interrupt",
            "sessionId": view.session_id,
            "chatId": view.session_id,
            "sender": {"kind": "agent", "id": f"a2a:{who.name}"},
            "idempotencyKey": f"a2a-cancel-{view.turn_id}",
            "mode": "hard",
        }
        async with self.ctx.hub.feed(view.session_id) as feed:
            await self._command(view.session_id, command, feed)
            deadline = time.monotonic() + self.ctx.options.accept_timeout_s
            async for _ in self._follow(record, feed, deadline, TERMINAL):
                pass
        return to_task(record)

    # ---- the shared path
    def _started(self, message: Message, who: Principal, *, tokens: bool = False) -> Any:
        return _Started(self, message, who, tokens)

    async def _command(self, session_id: str, command: dict[str, Any], feed: Feed) -> Any:
        try:
            follow, _, _ = await publish(self.ctx, session_id, command, feed)
        except Problem as problem:
            raise _a2a_error(problem) from None
        if follow.rejected is not None:
            event = follow.rejected.event
            raise InvalidParamsError(
                message=f"rejected: {getattr(event.data, 'reason', '')}",
                data={"turnId": event.turn_id, "seq": follow.rejected.seq},
            )
        return follow

    async def _follow(
        self,
        record: TaskRecord,
        feed: Feed,
        deadline: float | None,
        until: frozenset[str] = PAUSED,
    ) -> AsyncIterator[TaskRecord | TokenItem]:
        """The task's record each time its state changes, until its state is in `until`
        (or `deadline` passes, or the feed closes); each change is saved. Token deltas of
        the turn too, when the feed carries them."""
        view = record.view
        while view.state not in until:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            try:
                item = await feed.get(left if left is not None else 15.0)
            except Closed:
                return
            if isinstance(item, TokenItem):
                yield item
                continue
            if item is None or item.seq <= view.last_seq:
                continue
            if item.event_type in ACTED_ON:
                changed = view.feed(item.seq, decode(item.data))
            else:
                view.last_seq = item.seq
                changed = False
            if changed:
                await self.store.put(record)
                yield record

    async def _stream(
        self, record: TaskRecord, feed: Feed, until: frozenset[str]
    ) -> AsyncIterator[TaskStatusUpdateEvent | TaskArtifactUpdateEvent]:
        """A stream's events: the model's tokens as they come, appended to the `live`
        artifact; each state change as a status update; at the end, the `reply` artifact
        (the whole reply) before the final status."""
        view = record.view
        live = f"{view.turn_id}-live"
        started = False
        async for item in self._follow(record, feed, None, until):
            if isinstance(item, TokenItem):
                delta = token_text(item.data, view.turn_id)
                if delta:
                    yield TaskArtifactUpdateEvent(
                        task_id=view.turn_id,
                        context_id=view.session_id,
                        artifact=Artifact(artifact_id=live, name="live", parts=[Part(text=delta)]),
                        append=started,
                    )
                    started = True
                continue
            task = to_task(item)
            for artifact in task.artifacts:
                yield TaskArtifactUpdateEvent(
                    task_id=task.id, context_id=task.context_id, artifact=artifact, last_chunk=True
                )
            yield TaskStatusUpdateEvent(
                task_id=task.id, context_id=task.context_id, status=task.status
            )

    # ---- not offered
    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        raise PushNotificationNotSupportedError

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        raise PushNotificationNotSupportedError

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        raise ExtendedAgentCardNotConfiguredError


class _Started:
    """`async with`: the message published as the right command, the task's record and
    its session's feed (opened before publishing) for following it."""

    def __init__(self, handler: Handler, message: Message, who: Principal, tokens: bool) -> None:
        self.handler = handler
        self.message = message
        self.who = who
        self.tokens = tokens
        self._feed_cm: Any = None

    async def __aenter__(self) -> tuple[TaskRecord, Feed]:
        handler, message, who = self.handler, self.message, self.who
        if not text_of(message) and not any(p.HasField("data") for p in message.parts):
            raise InvalidParamsError(message="the message has no text part")
        record: TaskRecord | None = None
        if message.task_id:
            record = await handler.load(message.task_id, who)
            session = record.view.session_id
            if message.context_id and message.context_id != session:
                raise InvalidParamsError(
                    message=f"task {message.task_id} belongs to context {session}"
                )
        else:
            session = message.context_id or f"a2a-{uuid_utils.uuid7()}"
            if not is_session_id(session) or is_reserved_session(session):
                raise InvalidParamsError(
                    message=f"contextId {session!r} must be 1-128 of [A-Za-z0-9_:-]"
                )
        key = message.message_id or str(uuid_utils.uuid7())
        base = {
            "sessionId": session,
            "chatId": session,
            "sender": {"kind": "agent", "id": f"a2a:{who.name}"},
            "idempotencyKey": f"a2a-{key}",
        }
        sent = MessageToDict(message)
        sent.update(contextId=session)
        self._feed_cm = handler.ctx.hub.feed(session, tokens=self.tokens)
        feed = await self._feed_cm.__aenter__()
        try:
            if record is None:
                _require(who, "send", session)
                command = {"type": "message", **base, "text": text_of(message)}
                follow = await handler._command(session, command, feed)
                turn = follow.turn_id
                sent.update(taskId=turn)
                existing = await handler.store.get(turn)
                if existing is not None:  # a retried message: the task exists already
                    record = existing
                    await handler._catch_up(record)
                else:
                    # the turn's events start at its InputAccepted: read from there (exact,
                    # whatever the feed saw), not from the session's first event
                    start = follow.accepted.seq - 1 if follow.accepted else 0
                    view = TurnView(turn, session, last_seq=start)
                    record = TaskRecord(view, [sent], owner=who.name)
                    await handler._catch_up(record)
                    await handler.store.put(record)
            else:
                view = record.view
                if view.terminal:
                    raise InvalidParamsError(
                        message=f"task {view.turn_id} is {view.state}; send a message without "
                        "taskId (same contextId) to start the next turn"
                    )
                if view.state == "input-required" and view.interaction is not None:
                    _require(who, "approve", session)
                    answer, reason = decision(message)
                    command = {
                        "type": "answer",
                        **base,
                        "interactionId": view.interaction["interactionId"],
                        "decision": answer,
                        **({"reason": reason} if reason else {}),
                    }
                else:
                    _require(who, "send", session)
                    command = {"type": "steer", **base, "text": text_of(message)}
                await handler._command(session, command, feed)
                record.messages.append(sent)
                await handler._catch_up(record)
                await handler.store.put(record)
        except BaseException:
            await self._feed_cm.__aexit__(None, None, None)
            raise
        return record, feed

    async def __aexit__(self, *exc: object) -> None:
        await self._feed_cm.__aexit__(None, None, None)


def _who(context: ServerCallContext) -> Principal:
    who = context.state.get(PRINCIPAL)
    if not isinstance(who, Principal):  # the route always sets it
        raise InvalidRequestError(message="unauthenticated")
    return who


def _require(who: Principal, scope: Scope, session: str) -> None:
    if not who.allows(scope, session):
        raise InvalidRequestError(
            message=f"forbidden: key {who.name!r} may not {scope} in context {session!r}",
            data={"status": 403},
        )
