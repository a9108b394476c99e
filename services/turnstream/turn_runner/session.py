"""One session's actor: a small interpreter over the session's decider.

Each mailbox item is an input for `turnstream.core.session.decider.decide_session`. The actor
appends the decision's events (as one batch, conditional on `last_seq`; on a conflict it
reloads the session and decides the same input again), performs the effects the new
state asks for (model calls, hooks, timers), and feeds a hook's answer back as the next
input, until the session is quiet (`turnstream.runtime.interpreter.run_until_quiet`). A
model call runs on a side task, started beside the append of its `ProviderRequestStarted`
(`model_calls`: a quick call's outcome goes out in that same append); its outcome (and
each tool call it streams) comes back through the inbox, so an input that arrives
meanwhile is handled (queued or steered) while the model streams. The actor knows one
entry point of the core (`decide_session`, once per input); a decision that asks only
in-process context providers is held (`holds`) and appended with the next one, which
decides their answer.

Bookkeeping: `last_seq` is the session's last log sequence we know (the condition of our
next append); `input_mark` is the highest sequence of a delivered fact folded, so a
redelivered or already replayed fact is not folded twice. Facts the runner does not
consume (a mode verdict, a tool start) may land after `last_seq`: the next conditional
append then fails and the actor reloads the session, which is always correct. A delivered
fact moves `last_seq` up to its own sequence (`fact`), stepping over those: what lies
between is no other runner's, since the lease was held since a reload that read the
session up to its last event on the leader (`reload`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from datetime import datetime
from typing import assert_never

from turnstream.bus import AppendConflict
from turnstream.bus.appender import LogFull
from turnstream.core.events import Event
from turnstream.core.inputs import Fact, Tick, WakeAt
from turnstream.core.session import SessionState
from turnstream.core.session.decider import (
    Deliver,
    Effect,
    Input,
    ProviderDone,
    Providers,
    RunStageHooks,
    RunToolHooks,
    RunWorkflowHook,
    SessionDecision,
    StageHooksSaid,
    StorageRefused,
    TimeTurns,
    ToolHooksSaid,
    decide_session,
)
from turnstream.core.session.outbound import Outbound
from turnstream.core.session.subturns import waiting_on
from turnstream.core.turn import (
    Context,
    TurnConfig,
)
from turnstream.core.turn.context import ContextGathered, GatherContext
from turnstream.runtime.interpreter import run_until_quiet
from turnstream.runtime.leased import LeasedActor, LeaseLost
from turnstream.runtime.mailbox import Delivered
from turnstream.turn_runner import calls, snapshots
from turnstream.turn_runner.context import ActorContext, Item
from turnstream.turn_runner.model_calls import Gate, ModelCalls

log = logging.getLogger("turnstream.turn_runner")
MAX_CONFLICT_RETRIES = 20
RETRY_S = 1.0
"""After handling an item failed (e.g. the lease bucket or the log did not answer in
time), it is tried again this much later, until it succeeds."""
MAX_HOOK_ROUNDS = 20
"""Hook answers in a row for one item (hooks may let the turn reach more hooks)."""


class SessionActor(LeasedActor[Item]):
    log = logging.getLogger("turnstream.turn_runner")

    def __init__(self, ctx: ActorContext, session_id: str) -> None:
        self.ctx = ctx
        self.session_id = session_id
        self.lease = ctx.leases
        self.state = SessionState.of(session_id)
        self.last_seq = 0
        self.input_mark = 0
        self.held: tuple[Event, ...] = ()
        """Decided events not appended yet: `state` has them folded in (`holds`)."""
        self.loaded = False
        self.model_calls = ModelCalls(ctx, session_id)
        self.quick: ProviderDone | None = None
        """A held decision's call's outcome (`ModelCalls.quick`): `perform`'s answer."""
        self.timed_turns: frozenset[str] = frozenset()
        self.turn_timers: list[asyncio.TimerHandle] = []
        """The wall-time timers of the live turns: cancelled once none is live, so a quiet
        session keeps no timer (nor is reloaded from the log when it would fire)."""
        self.wakeup: datetime | None = None
        self.wake_timer: asyncio.TimerHandle | None = None
        """The timer for `wakeup`: cancelled once the state asks another wake-up or none."""
        self.refused: str | None = None
        """Why the log refused this session's events for want of storage, until the turns
        live then have ended (`StorageRefused`); `refusals` counts the tries, for backoff."""
        self.refusals = 0

    def busy(self) -> bool:
        """Work in flight or open: the mailbox must not retire this actor (its timers and
        its lease would go with it). Waiting out a full log is work owed too: what it keeps
        (`refused`: the turns then live end `storage_full`; `refusals`: the backoff) is not
        in the log."""
        return self.refused is not None or self.refusals > 0 or self.working()

    def working(self) -> bool:
        """A model call in flight, or a turn, input or workflow open in the state."""
        chat, run = self.state.chat, self.state.workflow
        open_work = (
            chat.active is not None
            or bool(chat.pending)
            or (run is not None and run.open)
            or waiting_on(self.state)
            or bool(self.state.unanswered)
        )
        return bool(self.model_calls) or (self.loaded and open_work)

    async def failed(self, item: Item) -> None:
        self.loaded = False  # reload from the log before the next item
        await self.again(item, RETRY_S)

    async def handle(self, item: Item) -> None:
        """Handle `item` if the session is this runner's (its lease, taken if it is free; or
        its partition, `ownership.py`): `LeasedActor.leased`. A session not loaded yet waits
        for one of the runner's load slots first (`context.LOADS_IN_FLIGHT`): a burst is
        taken in at the rate it can be served, and a lease is taken only when its session's
        turn comes."""
        if self.loaded:
            await self.leased(item)
            return
        async with self.ctx.loads:
            await self.leased(item)

    async def storage_wait(self, item: Item, exc: LogFull) -> None:
        """The log (or the lease bucket) refused even the end of the turns in flight: try
        `item` again later, backing off; the turns live now end `storage_full` once their
        ends fit."""
        if self.refused is None and self.loaded and self.working():
            self.refused = exc.description
        await super().storage_wait(item, exc)

    def refusal_standing(self) -> str | None:
        """Why the turns just reloaded are refused, if this process's appends to the log are
        refused now (or the log was at its limit when it started, `ownership.wake_waiting`):
        they end `storage_full` at their first step, as they would at their next append,
        and none calls the model again for an answer the log could not take. So a runner
        restarted on a full log does not go on with turns its predecessor was refused."""
        if not self.busy():
            return None
        return self.ctx.storage_refused(self.session_id)

    def unload(self) -> None:
        """Let go (`LeasedActor.let_go`): the calls in flight and the timers go too."""
        self.model_calls.cancel()
        self.untime_turns()
        self.unwake()

    def later(self, item: Item, delay_s: float) -> object:
        return self.ctx.deliver_later(self.session_id, item, delay_s)

    async def step(self, item: Item) -> None:
        """Run `item` through the decider, and every hook answer after it, until quiet."""
        reloaded = not self.loaded
        if reloaded:  # a delivered fact is in what is read: decoded once, not twice
            await self.reload({item.seq: item.event} if isinstance(item, Delivered) else None)
            self.refused = self.refused or self.refusal_standing()
        if isinstance(item, Delivered):
            # a reload has just folded the whole log, this fact included (a redelivery too)
            fact = None if reloaded else await self.fact(item)
            if fact is not None or reloaded:  # a reload may leave something to decide
                await self.run(fact or Tick())
            how = "reloaded" if reloaded else "folded already" if fact is None else "decided"
            log.debug("%s: ack %s, %s up to %d", self.session_id, item, how, self.last_seq)
            await item.msg.ack()
            return
        if isinstance(item, ProviderDone):
            self.model_calls.ended(item.turn_id)
        await self.run(item)

    async def fact(self, item: Delivered) -> Input | None:
        """The input a delivered fact is: the fact, unless it is folded already (None:
        e.g. a verdict this runner appended itself, folded when it was decided)."""
        if item.seq > self.input_mark:
            self.input_mark = item.seq
            self.last_seq = max(self.last_seq, item.seq)
            return Fact(item.event)
        if item.msg.metadata.num_delivered > 1:
            # a redelivery (e.g. nak'ed by a runner that did not hold the lease) can come
            # after later facts were folded: it may never have been folded here
            await self.reload()
            return Tick()
        return None

    async def run(self, item: Input) -> None:
        """Decide `item`, append, perform; a hook's answer is decided next, and so on."""
        await run_until_quiet(self, item, MAX_HOOK_ROUNDS)

    async def commit(self, item: Input) -> SessionDecision:
        """Append what `item` decides, conditional on `last_seq`; on conflict reload, redo.

        The events go out as one batch whose first carries the condition: refused, none
        is appended. Once the batch is in, this runner owns the decision. A decision held
        back (`holds`) goes out with the next one, first.
        """
        lease = self.lease
        for _ in range(MAX_CONFLICT_RETRIES):
            # e.g. this process was paused past the TTL: taken anew, the log is read again
            if not lease.holds(self.session_id) and await self.take_again():
                await self.reload()
                item = _refold(item)
            if self.refused is not None:  # the turns in flight end first, and nothing else
                item = StorageRefused(self.refused)
            decision = decide_session(self.state, item, self.config, self.context()).after(
                self.held
            )
            if not decision and self.refused is not None:
                self.refused, self.refusals = None, 0  # no turn was left in flight
            if not decision or self.holds(decision):
                self.state, self.held = decision.state, decision.events
                return decision
            gate, self.quick = await self.model_calls.quick(decision)
            if self.quick is not None:  # its call has answered: both go out in one append
                self.state, self.held = decision.state, decision.events
                return decision
            try:
                last = await self.append(decision, gate)
            except AppendConflict:
                if not await self.ctx.leases.confirm(self.session_id):
                    raise LeaseLost(self.session_id) from None  # another runner appended
                await self.reload()
                item = _refold(item)
                continue
            except LogFull as exc:
                if self.refused is not None:
                    raise  # even the turns' ends: `storage_wait`
                # nothing of the refused message on is stored (a prefix may be): the turns
                # live in what the log holds end `storage_full`, if their ends fit
                self.refused = exc.description
                await self.reload()
                continue
            log.debug("%s: appended %d event(s) up to %d", self.session_id, len(decision), last)
            self.refused, self.refusals = None, 0
            self.state, self.last_seq, self.held = decision.state, last, ()
            # the condition held: everything up to `last` is folded (ours, or read before),
            # so a delivery of our own events (a verdict we judged) is not decided again
            self.input_mark = max(self.input_mark, last)
            self.ctx.observe(decision.events)
            if not lease.holds(self.session_id):
                # paused past the TTL while appending: the next holder goes on from the log
                self.loaded = False
                raise LeaseLost(self.session_id)
            return decision
        raise RuntimeError(f"session {self.session_id}: {MAX_CONFLICT_RETRIES} conflicts in a row")

    async def append(self, decision: SessionDecision, gate: Gate | None) -> int:
        """Append `decision` conditional on `last_seq`, beside the calls it started."""
        store, expected = self.ctx.store, self.last_seq

        def append() -> Awaitable[int]:
            return store.append_decision(self.session_id, decision, expected_last_seq=expected)

        return await self.model_calls.beside(gate, append)

    def holds(self, decision: SessionDecision) -> bool:
        """Whether to hold `decision` back: it asks in-process context providers only, so
        their answer (`perform` gathers it) is decided next and both go out in one batch;
        the context costs no append round. A remote provider is asked after the append,
        like a hook."""
        if not any(type(effect) is GatherContext for effect in decision.effects):
            return False
        context = self.ctx.context
        return context is not None and context.local

    async def perform(self, effects: tuple[Effect, ...]) -> Input | None:
        """Do what the state asks; a hook's answer is the next input (or, with no hook to
        run, the messages delivered)."""
        answer: Input | None = None
        messages: tuple[Outbound, ...] = ()
        for effect in effects:
            match effect:
                case Providers(live=live, calls=calls):
                    self.model_calls.keep_only(live)
                    self.model_calls.start(calls, self.state.agent)
                case RunToolHooks(turn_id=turn_id, calls=calls):
                    hooks = self.ctx.hooks
                    verdicts = await hooks.run_tool_hooks(self.session_id, turn_id, list(calls))
                    answer = ToolHooksSaid(turn_id, tuple(verdicts))
                case RunStageHooks(turn_id=turn_id, stage=point, subject=subject):
                    hooks = self.ctx.hooks
                    said = await hooks.run_stage_hooks(self.session_id, turn_id, point, subject)
                    answer = StageHooksSaid(turn_id, said)
                case RunWorkflowHook(point=point, execution=ex):
                    hooks = self.ctx.hooks
                    answer = await hooks.run_workflow_hook(self.session_id, point, ex.stage_id, ex)
                case GatherContext(turn_id=turn_id, request=request):
                    context = self.ctx.context
                    found = await context.gather(request) if context is not None else ()
                    answer = ContextGathered(turn_id, found)
                case TimeTurns(live=live):
                    if live - self.timed_turns:
                        bound = self.config.max_turn_seconds
                        timer = self.ctx.deliver_later(self.session_id, Tick(), bound + 0.05)
                        self.turn_timers.append(timer)
                    self.timed_turns = live
                case WakeAt(at=at):
                    if at != self.wakeup:
                        self.unwake()
                        self.wakeup = at
                        delay = max((at - self.ctx.now()).total_seconds(), 0.0)
                        self.wake_timer = self.ctx.deliver_later(
                            self.session_id, Tick(), delay + 0.05
                        )
                case Deliver(messages=wanted):
                    messages = wanted
                case _:
                    assert_never(effect)
        if not any(isinstance(e, TimeTurns) for e in effects):
            self.untime_turns()
        if not any(isinstance(e, WakeAt) for e in effects):
            self.unwake()  # e.g. the sub-turn whose deadline it timed has ended
        if answer is None and messages:
            answer = await self.deliver(messages)
        if self.quick is not None:  # the held decision asked nothing else (`QUIET_EFFECTS`)
            answer, self.quick = self.quick, None
            self.model_calls.ended(answer.turn_id)
        return answer

    def untime_turns(self) -> None:
        """No turn is live (or the session is let go): its wall-time timers are moot."""
        for timer in self.turn_timers:
            timer.cancel()
        self.turn_timers.clear()
        self.timed_turns = frozenset()

    def unwake(self) -> None:
        """The state asks no wake-up at `wakeup` any more (or the session is let go)."""
        if self.wake_timer is not None:
            self.wake_timer.cancel()
        self.wake_timer = self.wakeup = None

    async def deliver(self, messages: tuple[Outbound, ...]) -> Input:
        """Publish the messages to their sessions (`calls.deliver`)."""
        return await calls.deliver(self.ctx, self.session_id, messages)

    @property
    def config(self) -> TurnConfig:
        return self.ctx.session(self.session_id)[1]

    async def reload(self, known: dict[int, Event] | None = None) -> None:
        """Rebuild the state from the log (the truth): the latest snapshot, then the tail
        (`known`: events decoded already, by sequence).

        The read goes up to the session's last event on the stream's leader (`latest`),
        and never less far than this actor has seen: at R3 a replica that has not applied
        the latest appends may answer a read. A state read from it could lack the fact
        being handled (acked as folded, the turn would wait for it forever), or a previous
        holder's last appends, which `fact` would then step over (a stale state's append
        passing the fence: a turn ended twice)."""
        kv = await self.ctx.snapshots()
        seen = max(self.last_seq, self.input_mark)
        self.state, self.last_seq, read, events = await snapshots.rebuild(
            kv, self.ctx.store, self.session_id, known, at_least=seen, latest=True
        )
        self.input_mark = self.last_seq
        self.held, self.quick = (), None
        self.loaded = True
        self.ctx.reloaded(read)
        if read > snapshots.EVERY:
            await snapshots.save(kv, self.state, self.last_seq, events)

    def context(self) -> Context:
        return Context(now=self.ctx.now(), new_id=self.ctx.new_id, source=self.ctx.source)


def _refold(item: Input) -> Input:
    """After a reload the log holds every fact: a delivered one is decided as a Tick."""
    return Tick() if isinstance(item, Fact) else item
