"""A session's model calls: each on a side task whose outcome (and each tool call it
streams) comes back through the session's inbox, started beside the append of the
decision that asks for it (issue 41: a call does not wait a round trip for its
`ProviderRequestStarted`).

Started so, a call yields through a `Gate`: its tokens, tool calls and outcome are kept
until that append is stored (`open`), and dropped if it is refused (the decision is made
again from the log, and asks again). A call that ends within `QUICK_ROUNDS` with nothing
but its outcome (a quick model: the scripted one, a cache) has its outcome `taken`: the
actor holds the decision and decides the outcome next, and both go out in one append, one
round trip fewer per model call. A slower call's decision is appended once those rounds
have passed.
A taken call's tokens go out before that append: should it be refused (another writer
appended to the session meanwhile), the call is made again and its tokens
stream again from index 0 (live tokens are a preview, DESIGN §3: not stored).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import replace
from datetime import datetime

import orjson

from turnstream.core.events import SessionConfiguredData
from turnstream.core.inputs import WakeAt
from turnstream.core.session.decider import (
    Input,
    ProviderDone,
    Providers,
    SessionDecision,
    TimeTurns,
    ToolCallReady,
)
from turnstream.core.turn import ProviderFailure, ProviderOutcome, ProviderRequest, ToolCall
from turnstream.turn_runner.context import ActorContext

log = logging.getLogger("turnstream.turn_runner")
QUICK_ROUNDS = 16
"""How many rounds of the event loop a decision that only starts a model call lets pass
for the call to end, to go out with what its outcome decides: one that makes no I/O (the
scripted provider, a cache) ends in a few; one that waits on the network does not, and its
decision is appended at once. Rounds, not a timer: on a busy loop (K = 50) a timer's grace
ran out before the call's turn came, and every such decision waited it out."""
QUIET_EFFECTS = (Providers, TimeTurns, WakeAt)
"""What a decision held for its call's outcome may ask besides the call (no hook, no
delivery: their answers would have to be decided first)."""


class Gate:
    """What the calls started beside one decision's append yield, kept until it is stored
    (`opened`: as they come, for a call started once its decision was)."""

    def __init__(self, ctx: ActorContext, session_id: str, opened: bool = False) -> None:
        self.ctx, self.session_id = ctx, session_id
        self.opened, self.dropped = opened, False
        self.live: list[tuple[str, bytes]] = []
        self.inbox: list[Input] = []
        self.turn_ids: list[str] = []
        """The turns whose calls were started behind it."""
        self.running = 0

    async def publish_live(self, turn_id: str, payload: bytes) -> None:
        if self.opened:
            await self.ctx.publish_live(self.session_id, turn_id, payload)
        elif not self.dropped:
            self.live.append((turn_id, payload))

    def deliver(self, item: Input) -> None:
        if self.opened:
            self.ctx.deliver(self.session_id, item)
        elif not self.dropped:
            self.inbox.append(item)

    async def open(self) -> None:
        """The decision is stored: what was kept goes out, in order, and the rest as it comes."""
        self.opened = True
        live, inbox, self.live, self.inbox = self.live, self.inbox, [], []
        for turn_id, payload in live:
            await self.ctx.publish_live(self.session_id, turn_id, payload)
        for item in inbox:
            self.ctx.deliver(self.session_id, item)

    def drop(self) -> None:
        """The decision was refused: nothing of its calls goes out."""
        self.dropped = True
        self.live.clear()
        self.inbox.clear()

    async def taken(self, rounds: int) -> ProviderDone | None:
        """The outcome of its one call, taken, if the call ends within `rounds` of the
        event loop with nothing else for the inbox (a streamed tool call is decided on its
        own)."""
        if self.running != 1:
            return None
        for _ in range(rounds):
            if not self.running:
                break
            await asyncio.sleep(0)
        done = self.inbox[0] if not self.running and len(self.inbox) == 1 else None
        if not isinstance(done, ProviderDone):
            return None
        self.inbox.clear()
        return done


class ModelCalls:
    """A session's model calls in flight, by turn id (a workflow's parallel stages call at
    once)."""

    def __init__(self, ctx: ActorContext, session_id: str) -> None:
        self.ctx, self.session_id = ctx, session_id
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def __bool__(self) -> bool:
        return bool(self.tasks)

    def start(
        self,
        requests: Iterable[ProviderRequest],
        agent: SessionConfiguredData | None,
        gate: Gate | None = None,
    ) -> Gate | None:
        """Start the calls not in flight yet, with `agent`'s provider, behind `gate` (None:
        their decision is stored, what they yield goes out as it comes); the gate, if any
        call started."""
        for request in requests:
            if request.turn_id in self.tasks:
                continue
            gate = gate or Gate(self.ctx, self.session_id, opened=True)
            self.tasks[request.turn_id] = call_model(self.ctx, agent, request, gate)
            gate.turn_ids.append(request.turn_id)
            gate.running += 1
        return gate if gate is not None and gate.turn_ids else None

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

    async def quick(self, decision: SessionDecision) -> tuple[Gate | None, ProviderDone | None]:
        """Start the calls `decision` asks for behind a gate (None: it starts none); if it
        asks nothing else and its one call ends within `QUICK_ROUNDS`, that call's
        outcome, taken (its tokens go out now: the live subject's deltas are a preview,
        and the reply they make must be seen before the turn's end is)."""
        requests = [r for e in decision.effects if type(e) is Providers for r in e.calls]
        if not requests:
            return None, None
        gate = self.start(requests, decision.state.agent, Gate(self.ctx, self.session_id))
        if gate is None or not all(type(e) in QUIET_EFFECTS for e in decision.effects):
            return gate, None
        done = await gate.taken(QUICK_ROUNDS)
        if done is not None:
            await gate.open()
        return gate, done

    async def beside(self, gate: Gate | None, append: Callable[[], Awaitable[int]]) -> int:
        """`append()` the decision whose calls were started behind `gate`; stored, the gate
        opens; refused, those calls are cancelled and nothing of them goes out."""
        if gate is None:
            return await append()
        try:
            last = await append()
        except BaseException:
            self.cancel(gate.turn_ids)
            gate.drop()
            raise
        await gate.open()
        return last


def call_model(
    ctx: ActorContext,
    agent: SessionConfiguredData | None,
    request: ProviderRequest,
    gate: Gate,
) -> asyncio.Task[None]:
    """Call the model for `request`'s turn on a side task (the session's `agent`'s provider,
    if its profile names one); its outcome comes back as an input, and so does each tool
    call it streams complete, through `gate`."""
    session_id = gate.session_id
    provider = (agent and ctx.agent_provider(agent)) or ctx.session(session_id)[0]
    index = 0
    first_byte_at: datetime | None = None

    async def on_delta(text: str) -> None:
        nonlocal index, first_byte_at
        first_byte_at = first_byte_at or ctx.now()
        payload = {"turnId": request.turn_id, "iteration": request.iteration}
        await gate.publish_live(
            request.turn_id, orjson.dumps({**payload, "index": index, "delta": text})
        )
        index += 1
        # let the flusher write it now: an SDK parsing a burst of buffered chunks never
        # yields on its own, and the token would wait for the whole burst
        await asyncio.sleep(0)

    async def on_tool_call(call: ToolCall) -> None:
        gate.deliver(ToolCallReady(request.turn_id, call, first_byte_at or ctx.now()))

    async def outcome() -> ProviderOutcome:
        try:
            files = await _files(ctx, request)
            asked = replace(request, files=files) if files else request
            return await provider.complete(asked, on_delta, on_tool_call)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a provider bug must still end the turn
            log.exception("provider %s raised", provider.name)
            return ProviderFailure(
                error_class="internal",
                message=f"{type(exc).__name__}: {exc}",
                retryable=False,
                failed_at=ctx.now(),
            )

    async def call() -> None:
        try:
            gate.deliver(ProviderDone(request.turn_id, await outcome()))
        finally:
            gate.running -= 1

    return ctx.spawn(call(), f"provider:{session_id}")


async def _files(ctx: ActorContext, request: ProviderRequest) -> dict[str, bytes]:
    """The bytes of the request's attachments the object store has, by SHA-256 (one not
    found becomes a note naming the file: the turn goes on)."""
    wanted = {a.sha256 for a in request.attachments}
    if not wanted or ctx.attachment is None:
        return {}
    found = await asyncio.gather(*(ctx.attachment(sha) for sha in wanted))
    return {sha: data for sha, data in zip(wanted, found, strict=True) if data is not None}
