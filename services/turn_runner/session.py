"""One session's actor: folds its facts, asks the pure core what's next, appends, acks.

Everything for a session happens on its own task, one item at a time, so a session
never runs two turns at once while different sessions proceed in parallel. The
provider call runs on a side task; its outcome comes back through the same inbox, so
an input that arrives meanwhile is handled (queued or steered) while the model streams.

Bookkeeping: `last_seq` is the session's last log sequence we know (the condition of
our next append); `input_mark` is the highest delivered-kind sequence folded, so a
redelivered or already-replayed input is not folded twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from turnstream.bus import AppendConflict
from turnstream.core.events import Event
from turnstream.core.turn import (
    Context,
    ProviderFailure,
    ProviderOutcome,
    SessionState,
    compose_request,
    decide,
    evolve,
    fold,
    needs_provider_call,
    on_provider_result,
)

if TYPE_CHECKING:
    from turnstream.turn_runner.app import Runner

log = logging.getLogger("turnstream.turn_runner")
MAX_CONFLICT_RETRIES = 20
IDLE_EXIT_S = 300.0


@dataclass(frozen=True, slots=True)
class Delivered:
    msg: Any
    seq: int
    event: Event


@dataclass(frozen=True, slots=True)
class ProviderDone:
    turn_id: str
    outcome: ProviderOutcome


Item = Delivered | ProviderDone


class SessionActor:
    def __init__(self, runner: Runner, session_id: str) -> None:
        self.runner = runner
        self.session_id = session_id
        self.state = SessionState(session_id)
        self.last_seq = 0
        self.input_mark = 0
        self.loaded = False
        self.closed = False
        self.inbox: asyncio.Queue[Item] = asyncio.Queue()
        self.provider_task: asyncio.Task[None] | None = None

    def deliver(self, item: Item) -> None:
        self.inbox.put_nowait(item)

    async def run(self) -> None:
        while True:
            try:
                item = await asyncio.wait_for(self.inbox.get(), IDLE_EXIT_S)
            except TimeoutError:
                if self.inbox.empty() and self.provider_task is None:
                    self.closed = True  # no await between the check and this: no lost item
                    return
                continue
            try:
                await self.handle(item)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("session %s: handling failed; reloading from the log", self.id)
                self.loaded = False
                if isinstance(item, Delivered):
                    await item.msg.nak(delay=1)

    @property
    def id(self) -> str:
        return self.session_id

    async def handle(self, item: Item) -> None:
        if not self.loaded:
            await self.reload()
        match item:
            case Delivered(msg=msg, seq=seq, event=event):
                if seq > self.input_mark:
                    self.state = evolve(self.state, event)
                    self.input_mark = seq
                    self.last_seq = max(self.last_seq, seq)
                await self.advance()
                await msg.ack()
            case ProviderDone(outcome=outcome):
                self.provider_task = None
                config, ctx = self.runner.turn_config, self.context()
                await self.commit(lambda s: on_provider_result(s, outcome, config, ctx))
                await self.advance()
        if needs_provider_call(self.state) and self.provider_task is None:
            self.start_provider_call(self.state)  # e.g. a turn recovered mid-call

    async def advance(self) -> None:
        config = self.runner.turn_config
        await self.commit(lambda s: decide(s, config, self.context()))

    async def commit(self, step: Callable[[SessionState], list[Event]]) -> None:
        """Append what `step` decides, conditional on `last_seq`; on conflict reload, redo.

        The first event carries the condition and is awaited alone: once it is in, this
        runner owns the decision, so the provider call (if the decision asks for one)
        starts while the rest of the events are still being appended.
        """
        store = self.runner.bus.store
        for _ in range(MAX_CONFLICT_RETRIES):
            events = step(self.state)
            if not events:
                return
            decided = fold(self.state, events)
            try:
                seqs = await store.append(
                    self.session_id, events[:1], expected_last_seq=self.last_seq
                )
            except AppendConflict:
                await self.reload()
                continue
            if needs_provider_call(decided) and self.provider_task is None:
                self.start_provider_call(decided)
            seqs += await store.append_facts(events[1:])
            self.state, self.last_seq = decided, seqs[-1]
            return
        raise RuntimeError(f"session {self.id}: {MAX_CONFLICT_RETRIES} append conflicts in a row")

    async def reload(self) -> None:
        """Rebuild the state from the session's whole log (the truth)."""
        stored = await self.runner.bus.store.read_session(self.session_id)
        state = SessionState(self.session_id)
        for item in stored:
            state = evolve(state, item.event)
        self.state = state
        self.last_seq = stored[-1].seq if stored else 0
        self.input_mark = self.last_seq
        self.loaded = True

    def context(self) -> Context:
        return Context(now=self.runner.now(), new_id=self.runner.new_id, source=self.runner.source)

    def start_provider_call(self, state: SessionState) -> None:
        request = compose_request(state, self.runner.turn_config)
        live = self.runner.bus.subjects.live(self.session_id, request.turn_id)
        nc = self.runner.bus.nc
        index = 0

        async def on_delta(text: str) -> None:
            nonlocal index
            payload = {"turnId": request.turn_id, "iteration": request.iteration}
            await nc.publish(live, orjson.dumps({**payload, "index": index, "delta": text}))
            index += 1

        async def call() -> None:
            try:
                outcome = await self.runner.provider.complete(request, on_delta)
            except Exception as exc:  # a provider bug must still end the turn
                log.exception("provider %s raised", self.runner.provider.name)
                outcome = ProviderFailure(
                    error_class="internal",
                    message=f"{type(exc).__name__}: {exc}",
                    retryable=False,
                    failed_at=self.runner.now(),
                )
            self.deliver(ProviderDone(request.turn_id, outcome))

        self.provider_task = asyncio.create_task(call(), name=f"provider:{self.session_id}")
