"""One session's actor: folds its facts, asks the pure core what's next, appends, acks.

The provider call runs on a side task and its outcome comes back through the inbox, so
an input that arrives meanwhile is handled (queued or steered) while the model streams.

Bookkeeping: `last_seq` is the session's last log sequence we know (the condition of our
next append); `input_mark` is the highest sequence of a delivered fact folded, so a
redelivered or already replayed fact is not folded twice. Facts the runner does not
consume (a mode verdict, a tool start) may land after `last_seq`: the next conditional
append then fails and the actor reloads the session, which is always correct.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

import orjson

from turnstream.bus import AppendConflict
from turnstream.bus.leases import Ownership
from turnstream.core.events import Event
from turnstream.core.turn import (
    Context,
    ProviderFailure,
    ProviderOutcome,
    SessionState,
    ToolCall,
    TurnConfig,
    awaiting_hooks,
    awaiting_stage_hooks,
    compose_request,
    decide,
    evolve,
    fold,
    needs_provider_call,
    on_hook_verdicts,
    on_provider_result,
    on_stage_hooks,
    on_tool_call_ready,
    stage_hook_text,
)
from turnstream.turn_runner import snapshots
from turnstream.turn_runner.leasing import LeaseLost

if TYPE_CHECKING:
    from turnstream.turn_runner.app import Runner

log = logging.getLogger("turnstream.turn_runner")
MAX_CONFLICT_RETRIES = 20


@dataclass(frozen=True, slots=True)
class Delivered:
    msg: Any
    seq: int
    event: Event


@dataclass(frozen=True, slots=True)
class ProviderDone:
    turn_id: str
    outcome: ProviderOutcome


@dataclass(frozen=True, slots=True)
class ToolCallReady:
    """The model finished one tool call's block while it streams on."""

    turn_id: str
    call: ToolCall
    first_byte_at: datetime


@dataclass(frozen=True, slots=True)
class Tick:
    """Wake up and decide again (a turn's wall-time bound may have passed)."""


Item = Delivered | ProviderDone | ToolCallReady | Tick


class SessionActor:
    def __init__(self, runner: Runner, session_id: str) -> None:
        self.runner = runner
        self.session_id = session_id
        self.state = SessionState(session_id)
        self.last_seq = 0
        self.input_mark = 0
        self.loaded = False
        self.provider_task: asyncio.Task[None] | None = None
        self.provider_turn: str | None = None
        self.timed_turn: str | None = None

    def busy(self) -> bool:
        return self.provider_task is not None

    async def failed(self, item: Item) -> None:
        self.loaded = False  # reload from the log before the next item
        if isinstance(item, Delivered):
            await item.msg.nak(delay=1)

    async def handle(self, item: Item) -> None:
        """Handle `item` if this runner holds the session's lease (taking it if it is free)."""
        match await self.runner.leases.ensure(self.session_id):
            case Ownership.ELSEWHERE:
                await self.let_go(item)
                return
            case Ownership.NEW:
                self.loaded = False  # another runner may have acted: the log knows
        try:
            await self.step(item)
        except LeaseLost:
            await self.let_go(item)

    async def let_go(self, item: Item) -> None:
        """Another runner holds the session: stop acting for it, never fight over it. A
        fact goes back to the consumer, to be redelivered until the holder takes it."""
        if self.loaded:
            log.info("session %s is leased elsewhere now; letting it go", self.session_id)
        self.loaded = False
        if self.provider_task is not None:
            self.provider_task.cancel()
            self.provider_task, self.provider_turn = None, None
        self.timed_turn = None
        if isinstance(item, Delivered):
            await item.msg.nak(delay=self.runner.lease_policy.retry_s)

    async def step(self, item: Item) -> None:
        if not self.loaded:
            await self.reload()
        config = self.config
        match item:
            case Delivered(msg=msg, seq=seq, event=event):
                if seq > self.input_mark:
                    self.state = evolve(self.state, event)
                    self.input_mark = seq
                    self.last_seq = max(self.last_seq, seq)
                elif msg.metadata.num_delivered > 1:
                    # a redelivery (e.g. nak'ed by a runner that did not hold the lease) can
                    # come after later facts were folded: it may never have been folded here
                    await self.reload()
                await self.advance()
                await msg.ack()
            case ProviderDone(turn_id=turn_id, outcome=outcome):
                if turn_id == self.provider_turn:
                    self.provider_task, self.provider_turn = None, None
                if self.is_current(turn_id):  # a late result of an ended turn is dropped
                    ctx = self.context()
                    await self.commit(lambda s: on_provider_result(s, outcome, config, ctx))
                await self.advance()
            case ToolCallReady(turn_id=turn_id, call=call, first_byte_at=first_byte_at):
                if not self.is_current(turn_id):
                    return
                ctx = self.context()
                await self.commit(lambda s: on_tool_call_ready(s, call, first_byte_at, config, ctx))
                await self.advance()
            case Tick():
                await self.advance()
        await self.after()

    def is_current(self, turn_id: str) -> bool:
        return self.state.active is not None and self.state.active.turn_id == turn_id

    @property
    def config(self) -> TurnConfig:
        return self.runner.for_session(self.session_id)[1]

    async def advance(self) -> None:
        config = self.config
        hooks = self.runner.hooks
        await self.commit(lambda s: decide(s, config, self.context()))
        for _ in range(MAX_CONFLICT_RETRIES):  # hooks may let the turn reach more hooks
            active = self.state.active
            if active is None:
                return
            if calls := awaiting_hooks(self.state, config):
                verdicts = await hooks.run_tool_hooks(self.session_id, active.turn_id, calls)
                step = partial(on_hook_verdicts, verdicts=verdicts, config=config)
            elif stage := awaiting_stage_hooks(self.state, config):
                text = stage_hook_text(self.state)
                verdict = await hooks.run_stage_hooks(self.session_id, active.turn_id, stage, text)
                step = partial(on_stage_hooks, verdict=verdict, config=config)
            else:
                return
            await self.commit(partial(step, ctx=self.context()))

    async def after(self) -> None:
        """Start, stop or time what the new state needs."""
        active = self.state.active
        if self.provider_task is not None and (
            active is None or active.turn_id != self.provider_turn
        ):
            self.provider_task.cancel()  # the turn it was for is over
            self.provider_task, self.provider_turn = None, None
        if needs_provider_call(self.state) and self.provider_task is None:
            self.start_provider_call(self.state)  # e.g. a turn recovered mid-call
        if active is not None and active.turn_id != self.timed_turn:
            self.timed_turn = active.turn_id
            bound = self.config.max_turn_seconds
            self.runner.mailboxes.deliver_later(self.session_id, Tick(), bound + 0.05)

    async def commit(self, step: Callable[[SessionState], list[Event]]) -> None:
        """Append what `step` decides, conditional on `last_seq`; on conflict reload, redo.

        The first event carries the condition and is awaited alone: once it is in, this
        runner owns the decision, so the provider call (if the decision asks for one)
        starts while the rest of the events are still being appended.
        """
        store, leases = self.runner.bus.store, self.runner.leases
        for _ in range(MAX_CONFLICT_RETRIES):
            if not leases.holds(self.session_id):  # e.g. this process was paused past the TTL
                match await leases.ensure(self.session_id):
                    case Ownership.ELSEWHERE:
                        raise LeaseLost(self.session_id)
                    case Ownership.NEW:
                        await self.reload()
            events = step(self.state)
            if not events:
                return
            decided = fold(self.state, events)
            try:
                seqs = await store.append(
                    self.session_id, events[:1], expected_last_seq=self.last_seq
                )
            except AppendConflict:
                if not await leases.confirm(self.session_id):
                    raise LeaseLost(self.session_id) from None  # another runner appended
                await self.reload()
                continue
            if needs_provider_call(decided) and self.provider_task is None:
                self.start_provider_call(decided)
            seqs += await store.append_facts(events[1:])
            self.state, self.last_seq = decided, seqs[-1]
            self.runner.observe(events)
            return
        raise RuntimeError(f"session {self.session_id}: {MAX_CONFLICT_RETRIES} conflicts in a row")

    async def reload(self) -> None:
        """Rebuild the state from the log (the truth): the latest snapshot, then the tail."""
        kv = await self.runner.snapshots()
        found = await snapshots.load(kv, self.session_id)
        state, after = found if found else (SessionState(self.session_id), 0)
        stored = await self.runner.bus.store.read_session(self.session_id, after_seq=after)
        for item in stored:
            state = evolve(state, item.event)
        self.state = state
        self.last_seq = stored[-1].seq if stored else after
        self.input_mark = self.last_seq
        self.loaded = True
        self.runner.reloaded_events += len(stored)
        if len(stored) > snapshots.EVERY:
            await snapshots.save(kv, state, self.last_seq)

    def context(self) -> Context:
        return Context(now=self.runner.now(), new_id=self.runner.new_id, source=self.runner.source)

    def start_provider_call(self, state: SessionState) -> None:
        provider, config = self.runner.for_session(self.session_id)
        request = compose_request(state, config)
        live = self.runner.bus.subjects.live(self.session_id, request.turn_id)
        nc = self.runner.bus.nc
        index = 0
        first_byte_at: datetime | None = None

        async def on_delta(text: str) -> None:
            nonlocal index, first_byte_at
            first_byte_at = first_byte_at or self.runner.now()
            payload = {"turnId": request.turn_id, "iteration": request.iteration}
            await nc.publish(live, orjson.dumps({**payload, "index": index, "delta": text}))
            index += 1
            # let the flusher write it now: an SDK parsing a burst of buffered chunks never
            # yields on its own, and the token would wait for the whole burst
            await asyncio.sleep(0)

        async def on_tool_call(call: ToolCall) -> None:
            at = first_byte_at or self.runner.now()
            ready = ToolCallReady(request.turn_id, call, at)
            self.runner.mailboxes.deliver(self.session_id, ready)

        async def call() -> None:
            try:
                outcome = await provider.complete(request, on_delta, on_tool_call)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a provider bug must still end the turn
                log.exception("provider %s raised", provider.name)
                outcome = ProviderFailure(
                    error_class="internal",
                    message=f"{type(exc).__name__}: {exc}",
                    retryable=False,
                    failed_at=self.runner.now(),
                )
            self.runner.mailboxes.deliver(self.session_id, ProviderDone(request.turn_id, outcome))

        self.provider_turn = request.turn_id
        self.provider_task = self.runner.spawn(call(), f"provider:{self.session_id}")
