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
    Decision,
    HookVerdict,
    ProviderFailure,
    ProviderOutcome,
    SessionState,
    StageHookVerdict,
    ToolCall,
    TurnConfig,
    awaiting_hooks,
    awaiting_stage_hooks,
    compose_request,
    decide,
    evolve,
    needs_provider_call,
    on_hook_verdicts,
    on_provider_result,
    on_stage_hooks,
    on_tool_call_ready,
    stage_hook_text,
)
from turnstream.core.workflow.run import (
    GATE,
    awaiting_workflow_hooks,
    lane_step,
    next_wakeup,
    on_assert,
    on_gate,
    turn_views,
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
    """Wake up and decide again: a turn's wall-time bound or a workflow's deferred gate or
    backoff may have passed, or the session's lease came free (`Runner.wake`)."""


Item = Delivered | ProviderDone | ToolCallReady | Tick


RETRY_OWN_ITEM_S = 1.0
"""A Tick or provider result whose handling failed (a reload refused, say) comes again."""


class SessionActor:
    def __init__(self, runner: Runner, session_id: str) -> None:
        self.runner = runner
        self.session_id = session_id
        self.state = SessionState(session_id)
        self.last_seq = 0
        self.input_mark = 0
        self.loaded = False
        self.provider_tasks: dict[str, asyncio.Task[None]] = {}
        """Provider calls in flight by turn id (a workflow's parallel stages call at once)."""
        self.timed_turns: set[str] = set()
        self.wakeup: datetime | None = None

    def busy(self) -> bool:
        """Work in flight or open: the mailbox must not retire this actor (its timers and
        its lease would go with it)."""
        state, run = self.state, self.state.workflow
        open_work = (
            state.active is not None or bool(state.pending) or (run is not None and run.open)
        )
        return bool(self.provider_tasks) or (self.loaded and open_work)

    async def failed(self, item: Item) -> None:
        self.loaded = False  # reload from the log before the next item
        if isinstance(item, Delivered):
            await item.msg.nak(delay=1)
        else:  # a wake-up or a result of this runner's own: retried, never dropped
            self.runner.mailboxes.deliver_later(self.session_id, item, RETRY_OWN_ITEM_S)

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
        for task in self.provider_tasks.values():
            task.cancel()
        self.provider_tasks.clear()
        self.timed_turns = set()
        self.wakeup = None
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
                self.provider_tasks.pop(turn_id, None)
                ctx = self.context()  # a late result of an ended turn changes nothing
                await self.commit(
                    lambda s: lane_step(
                        s,
                        turn_id,
                        config,
                        ctx,
                        lambda lane, cfg: on_provider_result(lane, outcome, cfg, ctx),
                    )
                )
                await self.advance()
            case ToolCallReady(turn_id=turn_id, call=call, first_byte_at=first_byte_at):
                ctx = self.context()
                at = first_byte_at
                await self.commit(
                    lambda s: lane_step(
                        s,
                        turn_id,
                        config,
                        ctx,
                        lambda lane, cfg: on_tool_call_ready(lane, call, at, cfg, ctx),
                    )
                )
                await self.advance()
            case Tick():
                await self.advance()
        await self.after()

    @property
    def config(self) -> TurnConfig:
        return self.runner.for_session(self.session_id)[1]

    async def advance(self) -> None:
        config = self.config
        await self.commit(lambda s: decide(s, config, self.context()))
        for _ in range(MAX_CONFLICT_RETRIES):  # hooks may let the turn reach more hooks
            step = await self.hook_step(config)
            if step is None:
                return
            await self.commit(step)

    async def hook_step(self, config: TurnConfig) -> Callable[[SessionState], Decision] | None:
        """Run the hooks one of the session's turns waits for; the step that records them."""
        hooks = self.runner.hooks
        ctx = self.context()
        for view, view_config in turn_views(self.state, config):
            assert view.active is not None
            turn_id = view.active.turn_id
            turn_step: Callable[[SessionState, TurnConfig], Decision] | None = None
            if calls := awaiting_hooks(view, view_config):
                verdicts = await hooks.run_tool_hooks(self.session_id, turn_id, calls)
                turn_step = partial(_with_verdicts, verdicts=verdicts, ctx=ctx)
            elif stage := awaiting_stage_hooks(view, view_config):
                text = stage_hook_text(view)
                said = await hooks.run_stage_hooks(self.session_id, turn_id, stage, text)
                turn_step = partial(_with_stage_verdict, verdict=said, ctx=ctx)
            if turn_step is not None:
                return partial(lane_step, turn_id=turn_id, config=config, ctx=ctx, step=turn_step)
        for point, ex in awaiting_workflow_hooks(self.state, config, ctx.now):
            answer = await hooks.run_workflow_hook(self.session_id, point, ex.stage_id, ex)
            execution = ex.execution_id
            if point == GATE:
                gate = answer.gate_outcome()
                return lambda s: on_gate(
                    s, execution, gate, config, ctx, gate=answer.hook, reason=answer.reason
                )
            judged = answer.assert_verdict()
            return lambda s: on_assert(
                s, execution, judged, config, ctx, asserter=answer.hook, reason=answer.reason
            )
        return None

    async def after(self) -> None:
        """Start, stop or time what the new state needs."""
        views = turn_views(self.state, self.config)
        live = {view.active.turn_id for view, _ in views if view.active is not None}
        for turn_id in [t for t in self.provider_tasks if t not in live]:
            self.provider_tasks.pop(turn_id).cancel()  # the turn it was for is over
        self.start_provider_calls(views)  # e.g. recovered mid-call
        if live - self.timed_turns:
            bound = self.config.max_turn_seconds
            self.runner.mailboxes.deliver_later(self.session_id, Tick(), bound + 0.05)
        self.timed_turns = live
        wakeup = next_wakeup(self.state, self.runner.now())
        if wakeup is not None and wakeup != self.wakeup:
            self.wakeup = wakeup
            delay = max((wakeup - self.runner.now()).total_seconds(), 0.0)
            self.runner.mailboxes.deliver_later(self.session_id, Tick(), delay + 0.05)

    async def commit(self, step: Callable[[SessionState], Decision]) -> None:
        """Append what `step` decides, conditional on `last_seq`; on conflict reload, redo.

        The events go out as one batch whose first carries the condition: refused, none
        is appended. Once the batch is in, this runner owns the decision and starts the
        provider call if the decision asks for one.
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
            decided = events.state
            try:
                last = await store.append_decision(
                    self.session_id, events, expected_last_seq=self.last_seq
                )
            except AppendConflict:
                if not await leases.confirm(self.session_id):
                    raise LeaseLost(self.session_id) from None  # another runner appended
                await self.reload()
                continue
            self.state, self.last_seq = decided, last
            self.runner.observe(events)
            if not leases.holds(self.session_id):
                # paused past the TTL while appending: the next holder goes on from the log
                self.loaded = False
                raise LeaseLost(self.session_id)
            self.start_provider_calls(turn_views(decided, self.config))
            return
        raise RuntimeError(f"session {self.session_id}: {MAX_CONFLICT_RETRIES} conflicts in a row")

    async def reload(self) -> None:
        """Rebuild the state from the log (the truth): the latest snapshot, then the tail."""
        kv = await self.runner.snapshots()
        store = self.runner.bus.store
        self.state, self.last_seq, read = await snapshots.rebuild(kv, store, self.session_id)
        self.input_mark = self.last_seq
        self.loaded = True
        self.runner.reloaded_events += read
        if read > snapshots.EVERY:
            await snapshots.save(kv, self.state, self.last_seq)

    def context(self) -> Context:
        return Context(now=self.runner.now(), new_id=self.runner.new_id, source=self.runner.source)

    def start_provider_calls(self, views: list[tuple[SessionState, TurnConfig]]) -> None:
        """Start the model call of each turn that waits for one and has none in flight."""
        for view, view_config in views:
            turn = view.active
            if needs_provider_call(view) and turn and turn.turn_id not in self.provider_tasks:
                self.start_provider_call(view, view_config)

    def start_provider_call(self, state: SessionState, config: TurnConfig) -> None:
        provider = self.runner.for_session(self.session_id)[0]
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

        task = self.runner.spawn(call(), f"provider:{self.session_id}")
        self.provider_tasks[request.turn_id] = task


def _with_verdicts(
    state: SessionState, config: TurnConfig, *, verdicts: list[HookVerdict], ctx: Context
) -> Decision:
    return on_hook_verdicts(state, verdicts, config, ctx)


def _with_stage_verdict(
    state: SessionState, config: TurnConfig, *, verdict: StageHookVerdict, ctx: Context
) -> Decision:
    return on_stage_hooks(state, verdict, config, ctx)
