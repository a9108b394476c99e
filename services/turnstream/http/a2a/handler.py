"""The A2A request handler: each A2A method as inbound commands and reads of the log.

- `contextId` is the session (a new `a2a-<uuid>` when the client sends none), `taskId` the
  turn (the `turnId` of the message's `InputAccepted`).
- `SendMessage` / `SendStreamingMessage`: the message as a command (`inbound.Started`);
  it waits (or streams) until the turn ends or asks for approval (`input-required`).
- `GetTask` / `ListTasks` / `SubscribeToTask`: the task's entry in KV, folded forward from
  the log (`tasks.Tasks`).
- `CancelTask`: a hard `interrupt`.
- push-notification configs: set / get / list / delete per task (`push.PushConfigs`).

Every method checks the caller's key against the task's session (scopes `send`, `read`,
`approve`, as the REST routes do).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types.a2a_pb2 import (
    AgentCard,
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
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.constants import DEFAULT_LIST_TASKS_PAGE_SIZE, MAX_LIST_TASKS_PAGE_SIZE
from a2a.utils.errors import (
    ExtendedAgentCardNotConfiguredError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from turnstream.http.a2a.access import require, who
from turnstream.http.a2a.inbound import Started, command
from turnstream.http.a2a.mapping import STATES, to_task
from turnstream.http.a2a.push import PushConfigs
from turnstream.http.a2a.store import TaskRecord
from turnstream.http.a2a.tasks import ContextSource, Tasks
from turnstream.http.a2a.view import PAUSED, TERMINAL
from turnstream.http.auth import Principal


class Handler(RequestHandler):
    """One per app; reads the bus and hub from the app's context at each call."""

    def __init__(self, context: ContextSource) -> None:
        self.tasks = Tasks(context)
        self.push = PushConfigs(self.tasks)

    # ---- reads
    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task:
        record = await self.tasks.load(params.id, who(context))
        length = params.history_length if params.HasField("history_length") else None
        return to_task(record, length)

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        """The caller's tasks (sessions its key may read), newest first (task ids are
        UUIDv7), of one context or status if asked; each on the page folded to now."""
        caller, tasks = who(context), self.tasks
        if params.context_id:
            require(caller, "read", params.context_id)
        elif not caller.allows("read"):
            require(caller, "read", "*")
        records = [
            r
            for r in await tasks.store.all()
            if caller.allows("read", r.view.session_id)
            and (not params.context_id or r.view.session_id == params.context_id)
        ]
        by_status = params.status != TaskState.TASK_STATE_UNSPECIFIED
        for record in records if by_status else []:
            await tasks.catch_up(record)  # a filter on status needs the status now
        if by_status:
            records = [r for r in records if STATES[r.view.state] == params.status]
        records.sort(key=lambda r: r.view.turn_id, reverse=True)
        if params.page_token:
            records = [r for r in records if r.view.turn_id < params.page_token]
        size = min(params.page_size or DEFAULT_LIST_TASKS_PAGE_SIZE, MAX_LIST_TASKS_PAGE_SIZE)
        page = records[:size]
        for record in page if not by_status else []:
            await tasks.catch_up(record)
        length = params.history_length if params.HasField("history_length") else None
        listed = [to_task(r, length) for r in page]
        if not params.include_artifacts:
            for task in listed:
                del task.artifacts[:]
        return ListTasksResponse(
            tasks=listed,
            next_page_token=page[-1].view.turn_id if len(records) > size else "",
            page_size=size,
            total_size=len(records),
        )

    # ---- commands
    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        blocking = not params.configuration.return_immediately
        caller = who(context)
        await self._check_push(params)
        async with Started(self.tasks, params.message, caller, False) as (record, feed):
            await self._push_from(params, record, caller)
            if blocking and record.view.state not in PAUSED:
                deadline = time.monotonic() + self.tasks.ctx.options.wait_default_s
                async for _ in self.tasks.follow(record, feed, deadline):
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
        caller = who(context)
        await self._check_push(params)
        async with Started(self.tasks, params.message, caller, True) as (record, feed):
            await self._push_from(params, record, caller)
            yield to_task(record)
            if record.view.state in PAUSED:
                return
            async for event in self.tasks.stream(record, feed, PAUSED):
                yield event

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Any]:
        tasks = self.tasks
        record = await tasks.store.get(params.id)
        if record is None:
            raise TaskNotFoundError(message=f"no task {params.id!r}")
        require(who(context), "read", record.view.session_id)
        async with tasks.ctx.hub.feed(record.view.session_id, tokens=True) as feed:
            await tasks.catch_up(record)  # after the feed: nothing slips between the two
            if record.view.terminal:
                raise UnsupportedOperationError(
                    message=f"task {params.id} is {record.view.state}: nothing to subscribe to"
                )
            yield to_task(record)
            # a subscriber watches the task to its end, through any prompts on the way
            async for event in tasks.stream(record, feed, TERMINAL):
                yield event

    async def on_cancel_task(
        self, params: CancelTaskRequest, context: ServerCallContext
    ) -> Task | None:
        caller, tasks = who(context), self.tasks
        record = await tasks.load(params.id, caller, "send")
        view = record.view
        if view.terminal:
            raise TaskNotCancelableError(message=f"task {params.id} is {view.state} already")
        body = {
            "type": "interrupt",
            "sessionId": view.session_id,
            "chatId": view.session_id,
            "sender": {"kind": "agent", "id": f"a2a:{caller.name}"},
            "idempotencyKey": f"a2a-cancel-{view.turn_id}",
            "mode": "hard",
        }
        async with tasks.ctx.hub.feed(view.session_id) as feed:
            await command(tasks, view.session_id, body, feed)
            deadline = time.monotonic() + tasks.ctx.options.accept_timeout_s
            async for _ in tasks.follow(record, feed, deadline, TERMINAL):
                pass
        return to_task(record)

    # ---- push notifications (`push.PushConfigs`; sent by `pusher.Pusher`)
    async def _check_push(self, params: SendMessageRequest) -> None:
        """A webhook given with a message is checked before the message is sent."""
        if params.configuration.HasField("task_push_notification_config"):
            await self.push.check_url(params.configuration.task_push_notification_config.url)

    async def _push_from(
        self, params: SendMessageRequest, record: TaskRecord, caller: Principal
    ) -> None:
        """The webhook a message gives (`configuration.taskPushNotificationConfig`), set
        for its task as soon as the task exists: told of every change after."""
        if params.configuration.HasField("task_push_notification_config"):
            config = TaskPushNotificationConfig()
            config.CopyFrom(params.configuration.task_push_notification_config)
            config.task_id = record.view.turn_id
            await self.push.create(config, caller)

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        return await self.push.create(params, who(context))

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        return await self.push.get(params.task_id, params.id, who(context))

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        return await self.push.list(params.task_id, who(context))

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        await self.push.delete(params.task_id, params.id, who(context))

    # ---- not offered
    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        raise ExtendedAgentCardNotConfiguredError
