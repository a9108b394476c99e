"""approval shell: consume the calls that need a person and the answers, append
decisions, time out prompts.

The turn-runner judges every call in the decision that proposes it
(`turnstream.core.approval.judge`); what it cannot decide without a person comes here: a
`ToolCallModeInvoked{ask}` (ask mode, an allowlist miss) or a stage's call outside its
allowed tools (a grant). Any other verdict or proposal is acked at once: no session is
loaded for it, no log read, no lease touched (the turn's hot path).

Any number of instances share the `approval` durable (a deliver group). A session's prompts
are decided by one of them at a time: the holder of the session's approval lease
(`approval.<session>` in the leases bucket, beside the turn-runner's `session.<session>`).
What needs a person is handled only under that lease: an instance that does not hold it
naks the delivery with a short delay (`lease_retry_s`) until the holder gets it. The holder
keeps the lease while a prompt is open, lets it go when none is, and hands it over on
shutdown; an instance that takes a session over (its holder died, or handed it over)
rebuilds the session's prompts from the log and times their deadlines again. A turn's end
is acked unread unless this instance holds the session or the lease watch says another
one does: then it goes to the holder, whose open prompt it closes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import orjson

from turnstream.bus import Bus
from turnstream.bus.durables import APPROVAL
from turnstream.bus.leases import LeaseTable
from turnstream.bus.retry import retried, stoppable
from turnstream.core import approval
from turnstream.core.approval import ApprovalConfig, ApprovalDecision, ApprovalState
from turnstream.core.events import Event, ToolCallModeInvoked, TurnEnded
from turnstream.core.inputs import Fact, Tick, WakeAt
from turnstream.runtime import now, run_service, service_bus, source_name, telemetry
from turnstream.runtime.interpreter import run_until_quiet
from turnstream.runtime.leased import LeasedActor, Served, SessionLeases
from turnstream.runtime.leasing import LeasePolicy
from turnstream.runtime.mailbox import Delivered, Mailboxes
from turnstream.settings import Settings

log = logging.getLogger("turnstream.approval")
DURABLE = APPROVAL.name
LEASES = "approval"
"""The namespace of the approval service's session leases (`approval.<session>`)."""
CONSUMES = APPROVAL.kinds or ()


Item = Delivered | Tick


class ApprovalActor(LeasedActor[Item]):
    log = logging.getLogger("turnstream.approval")
    lease: SessionLeases

    def __init__(self, service: ApprovalService, session_id: str) -> None:
        self.service = service
        self.session_id = session_id
        self.lease = service.leases
        self.state = ApprovalState(session_id)
        self.loaded = False
        self.timer: asyncio.TimerHandle | None = None
        self.refusals = 0

    def busy(self) -> bool:
        """A prompt's deadline to time, or a full log's backoff (`refusals`) under way."""
        return self.refusals > 0 or approval.next_deadline(self.state) is not None

    async def failed(self, item: Item) -> None:
        self.loaded = False
        await self.again(item, 1.0)

    async def handle(self, item: Item) -> None:
        """Handle `item` if this instance holds the session's approval lease (taking it if
        it is free); a fact that needs no look at the session is acked without it."""
        if isinstance(item, Delivered) and self.unread(item.event):
            if isinstance(item.event, TurnEnded):
                self.loaded = False  # what was loaded misses this end: a later load reads it
            await item.msg.ack()
            return
        if await self.leased(item):
            self.refusals = 0

    def unread(self, event: Event) -> bool:
        """Whether a delivered fact is acked without loading the session or its lease: a
        call the turn-runner judged; a turn's end that no instance holds a prompt for (a
        later load reads it from the log)."""
        if not approval.needs_person(event):
            return True
        if not isinstance(event, TurnEnded):
            return False
        if self.loaded and self.lease.holds(self.session_id):
            return False
        # the holder's open prompt ends with the turn: it must hear of it
        return not self.lease.elsewhere(self.session_id)

    async def step(self, item: Item) -> None:
        """Decide `item` under the lease, on the session read again from the log when what
        is in memory may be behind it."""
        if isinstance(item, Tick):
            self.loaded = False  # a wake-up (a deadline, a take-over) decides on the log as it is
        elif isinstance(item.event, ToolCallModeInvoked) and self.loaded:
            # asked about a proposal this session's state has not seen (it was acked
            # unread): read the session again
            self.loaded = approval.knows(self.state, item.event.data.invocation_id)
        if not self.loaded:
            await self.reload(item)
        # one round: an approval decision's one effect (its deadline's timer) has no
        # answer. The timer is set before the ack now: the message is still acked only once
        # the decision is in the log, and a wake-up it brings waits in the inbox until this
        # item is done
        await run_until_quiet(self, item, max_rounds=1)
        if isinstance(item, Delivered):
            log.debug("%s: ack %s", self.session_id, item)
            await item.msg.ack()

    async def reload(self, item: Item | None = None) -> None:
        """The session's prompts rebuilt from the log (the truth), read at least up to the
        delivered fact `item`, or for a wake-up up to the log's last event now: a replica
        answering the read may not have them yet, and a decision on less (a deadline
        passed for a prompt answered just before it) would be appended as it is."""
        known = {item.seq: item.event} if isinstance(item, Delivered) else None
        store = self.service.bus.store
        stored = await store.read_session(self.session_id, known=known, latest=known is None)
        self.state = approval.fold(ApprovalState(self.session_id), [s.event for s in stored])
        self.loaded = True

    def unload(self) -> None:
        """Let go (`LeasedActor.let_go`): its holder times its prompts now."""
        self.state = ApprovalState(self.session_id)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def later(self, item: Item, delay_s: float) -> object:
        return self.service.mailboxes.deliver_later(self.session_id, item, delay_s)

    async def commit(self, item: Item) -> ApprovalDecision:
        """Decide `item` (a fact, or a wake-up) and append what it decides."""
        svc = self.service
        # e.g. paused past the TTL since `handle`: taken anew, the log is read again
        if not self.lease.holds(self.session_id) and await self.take_again():
            await self.reload(item)
        fact = Fact(item.event) if isinstance(item, Delivered) else Tick()
        decision = approval.decide_input(self.state, fact, svc.config, svc.clock(), svc.source)
        if decision.events:
            await svc.bus.store.append_facts(decision.events)
            log.debug("%s: appended %s", self.session_id, [e.type for e in decision.events])
            telemetry.approval_waits(self.state, item, decision.events)
        self.state = decision.state
        return decision

    async def perform(self, effects: tuple[WakeAt, ...]) -> None:
        """Time the open prompt's deadline (the only effect an approval decision has)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        for wake in effects:
            delay = (wake.at - self.service.clock()).total_seconds() + 0.01
            self.timer = self.service.mailboxes.deliver_later(self.session_id, Tick(), delay)


class ApprovalService:
    def __init__(
        self,
        bus: Bus,
        config: ApprovalConfig,
        *,
        settings: Settings | None = None,
        clock: Callable[[], datetime] = now,
    ) -> None:
        self.bus = bus
        self.config = config
        self.clock = clock
        self.source = source_name("approval")
        policy = self.lease_policy = LeasePolicy.from_settings(settings)
        table = LeaseTable.on(bus, policy.owner(self.source), ttl_s=policy.ttl_s, namespace=LEASES)
        self.leases = SessionLeases(table, policy, resume=self._on_start, watch_holders=True)
        """The sessions' approval leases; the watch tells who holds each (`unread`)."""
        self.mailboxes: Mailboxes[Item] = Mailboxes(lambda key: ApprovalActor(self, key))

    async def serve(self, stop: asyncio.Event) -> None:
        pending = self.bus.subjects.api("approval", "pending")
        # `pending.<session>`: one session's prompts, on a subject a person's NATS user can
        # be granted by name (ops/accounts.conf: an approver of some tenants' sessions)
        api_subs = [
            await self.bus.nc.subscribe(pending, cb=self._pending),
            await self.bus.nc.subscribe(pending + ".*", cb=self._pending),
        ]
        log.info(
            "approval %s consuming %s; default mode %s",
            self.leases.owner,
            CONSUMES,
            self.config.default_mode,
        )
        try:
            served = Served(self.bus, self.mailboxes, APPROVAL, self.has_open_work, self.wake)
            await self.leases.serve(served, stop)
        finally:
            for sub in api_subs:
                await sub.unsubscribe()

    def has_open_work(self, session_id: str) -> bool:
        """Whether the session's approval lease must be kept: a prompt is open."""
        actor = self.mailboxes.actor(session_id)
        return isinstance(actor, ApprovalActor) and actor.busy()

    def wake(self, session_id: str) -> None:
        """Have the session's actor look at its session again (e.g. take over its lease)."""
        self.mailboxes.deliver(session_id, Tick())

    async def _on_start(self, _served: Served[Item], stop: asyncio.Event) -> None:
        """Once sessions can be served (and the lease watch takes over the sessions of
        instances that stop renewing their leases): resume open prompts."""
        resumed = retried("the sessions with a prompt open", self._resume_open_prompts)
        await stoppable(resumed, stop)  # NATS slow: asked again, never an exit

    async def _resume_open_prompts(self) -> None:
        """After a restart: load every session that may have a prompt still open, so its
        deadline is timed again (deadlines are in the log), and every session with a recent
        call that needs a person, which may not have been asked yet (its delivery would
        come back only after the consumer's ack wait)."""
        since = self.clock() - timedelta(seconds=self.config.answer_timeout_s + 60)
        store = self.bus.store
        requested = await store.read_kind("InteractionRequested", since=since)
        asked = await store.read_kind("ToolCallModeInvoked", since=since)
        proposed = await store.read_kind("ToolInvocationProposed", since=since)
        waiting = [s for s in [*asked, *proposed] if approval.needs_person(s.event)]
        for session_id in {s.event.session_id for s in [*requested, *waiting]}:
            self.wake(session_id)  # one held elsewhere is woken again if its lease expires

    def pending(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """The open prompts of the sessions this instance acts for, for `turnstream
        approvals` (which gathers every instance's)."""
        out = []
        for key, box in self.mailboxes.boxes.items():
            actor = box.actor
            if (session_id and key != session_id) or not isinstance(actor, ApprovalActor):
                continue
            found = approval.open_interaction(actor.state)
            if found is None:
                continue
            interaction, proposal = found
            out.append(
                {
                    "interactionId": interaction.interaction_id,
                    "sessionId": key,
                    "turnId": proposal.event.turn_id,
                    "invocationId": interaction.invocation_id,
                    "tool": proposal.event.data.tool,
                    "args": proposal.event.data.args,
                    "deadline": interaction.deadline.isoformat(),
                    "answered": interaction.answer is not None,
                }
            )
        return out

    async def _pending(self, msg: Any) -> None:
        try:
            query = orjson.loads(msg.data) if msg.data else {}
            base = self.bus.subjects.api("approval", "pending")
            session_id = msg.subject[len(base) + 1 :] or query.get("sessionId")
            body = orjson.dumps({"pending": self.pending(session_id)})
        except Exception as exc:
            body = orjson.dumps({"error": f"{type(exc).__name__}: {exc}"})
        await msg.respond(body)


async def serve(settings: Settings, stop: asyncio.Event, bus: Bus | None = None) -> None:
    async with service_bus(settings, "approval", bus) as bus:
        await ApprovalService(bus, settings.approval_config(), settings=settings).serve(stop)


def main() -> None:
    run_service("approval", serve)
