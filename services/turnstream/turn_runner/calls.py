"""What a session actor does outside the log: the model call, on a side task whose outcome
(and each tool call it streams) comes back through the session's inbox, and the messages
a turn delivers to other sessions."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import replace
from datetime import datetime

import orjson

from turnstream.bus.permissions import PermissionDenied
from turnstream.core.events import SessionConfiguredData
from turnstream.core.session.decider import (
    Input,
    ProviderDone,
    Providers,
    Published,
    SessionDecision,
    ToolCallReady,
)
from turnstream.core.session.outbound import Outbound
from turnstream.core.turn import ProviderFailure, ProviderRequest, ToolCall
from turnstream.turn_runner.context import ActorContext

log = logging.getLogger("turnstream.turn_runner")


class ModelCalls:
    """A session's model calls in flight, by turn id (a workflow's parallel stages call at
    once), each on a side task (`call_model`)."""

    def __init__(self, ctx: ActorContext, session_id: str) -> None:
        self.ctx, self.session_id = ctx, session_id
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def __bool__(self) -> bool:
        return bool(self.tasks)

    def start(
        self,
        requests: Iterable[ProviderRequest],
        agent: SessionConfiguredData | None,
        appended: asyncio.Future[None] | None = None,
    ) -> list[str]:
        """Start the calls not in flight yet, with `agent`'s provider; their turn ids."""
        started = []
        for request in requests:
            if request.turn_id not in self.tasks:
                task = call_model(self.ctx, self.session_id, agent, request, appended)
                self.tasks[request.turn_id] = task
                started.append(request.turn_id)
        return started

    def keep_only(self, live: Collection[str]) -> None:
        """Cancel the calls of turns no longer live."""
        self.cancel([turn_id for turn_id in self.tasks if turn_id not in live])

    def cancel(self, turn_ids: Iterable[str] | None = None) -> None:
        """Cancel these calls (None: all of them)."""
        for turn_id in list(self.tasks if turn_ids is None else turn_ids):
            self.tasks.pop(turn_id).cancel()

    def ended(self, turn_id: str) -> None:
        """The turn's call is over (a late outcome too)."""
        self.tasks.pop(turn_id, None)

    async def beside(self, decision: SessionDecision, append: Callable[[], Awaitable[int]]) -> int:
        """`append()` the decision, the model calls it asks for started meanwhile: a call
        does not wait a round trip for its `ProviderRequestStarted`, and nothing of it (a
        token, a tool call, its outcome) reaches the live subject or the inbox before that
        is stored. Refused, the calls are cancelled: the decision is made again."""
        appended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        requests = [r for e in decision.effects if type(e) is Providers for r in e.calls]
        started = self.start(requests, decision.state.agent, appended)
        try:
            last = await append()
        except BaseException:
            self.cancel(started)
            raise
        appended.set_result(None)
        return last


def call_model(
    ctx: ActorContext,
    session_id: str,
    agent: SessionConfiguredData | None,
    request: ProviderRequest,
    appended: asyncio.Future[None] | None = None,
) -> asyncio.Task[None]:
    """Call the model for `request`'s turn on a side task (the session's `agent`'s provider,
    if its profile names one); its outcome comes back as an input, and so does each tool
    call it streams complete. `appended`: the call started beside the append of its
    `ProviderRequestStarted`; what it yields waits for that to be stored."""
    provider = (agent and ctx.agent_provider(agent)) or ctx.session(session_id)[0]
    index = 0
    first_byte_at: datetime | None = None

    async def stored() -> None:
        if appended is not None and not appended.done():
            await asyncio.shield(appended)  # shared: cancelling one call must not cancel it

    async def on_delta(text: str) -> None:
        nonlocal index, first_byte_at
        first_byte_at = first_byte_at or ctx.now()
        await stored()
        payload = {"turnId": request.turn_id, "iteration": request.iteration}
        delta = orjson.dumps({**payload, "index": index, "delta": text})
        await ctx.publish_live(session_id, request.turn_id, delta)
        index += 1
        # let the flusher write it now: an SDK parsing a burst of buffered chunks never
        # yields on its own, and the token would wait for the whole burst
        await asyncio.sleep(0)

    async def on_tool_call(call: ToolCall) -> None:
        at = first_byte_at or ctx.now()
        await stored()
        ctx.deliver(session_id, ToolCallReady(request.turn_id, call, at))

    async def call() -> None:
        try:
            files = await _files(ctx, request)
            asked = replace(request, files=files) if files else request
            outcome = await provider.complete(asked, on_delta, on_tool_call)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a provider bug must still end the turn
            log.exception("provider %s raised", provider.name)
            outcome = ProviderFailure(
                error_class="internal",
                message=f"{type(exc).__name__}: {exc}",
                retryable=False,
                failed_at=ctx.now(),
            )
        await stored()
        ctx.deliver(session_id, ProviderDone(request.turn_id, outcome))

    return ctx.spawn(call(), f"provider:{session_id}")


async def _files(ctx: ActorContext, request: ProviderRequest) -> dict[str, bytes]:
    """The bytes of the request's attachments the object store has, by SHA-256 (one not
    found becomes a note naming the file: the turn goes on)."""
    wanted = {a.sha256 for m in request.messages for a in m.attachments}
    if not wanted or ctx.attachment is None:
        return {}
    found = await asyncio.gather(*(ctx.attachment(sha) for sha in wanted))
    return {sha: data for sha, data in zip(wanted, found, strict=True) if data is not None}


async def deliver(ctx: ActorContext, session_id: str, messages: tuple[Outbound, ...]) -> Input:
    """Publish each message to its session's inbound subject, its key as `Nats-Msg-Id`
    (a redo after a crash is deduplicated there); recorded once all are acknowledged,
    or refused by the server (then never sent: asking again would be refused again)."""
    publish = ctx.publish_inbound
    outcomes = await asyncio.gather(
        *(publish(m.to, m.payload(), m.key) for m in messages), return_exceptions=True
    )
    refused: list[tuple[str, str]] = []
    for message, outcome in zip(messages, outcomes, strict=True):
        if isinstance(outcome, PermissionDenied):
            log.error("%s: %s", session_id, outcome)
            refused.append((message.key, str(outcome)))
        elif isinstance(outcome, BaseException):
            raise outcome
    done = frozenset(m.key for m in messages) - {key for key, _ in refused}
    return Published(done, tuple(refused))
