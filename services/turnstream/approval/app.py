"""approval shell: consume the calls that need a person and the answers, append
decisions, time out prompts.

The turn-runner judges every call in the decision that proposes it
(`turnstream.core.approval.judge`); what it cannot decide without a person comes here: a
`ToolCallModeInvoked{ask}` (ask mode, an allowlist miss) or a stage's call outside its
allowed tools (a grant). Any other verdict or proposal is acked at once: no session is
loaded for it, no log read."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import orjson

from turnstream.bus import Bus
from turnstream.core import approval
from turnstream.core.approval import ApprovalConfig, ApprovalDecision, ApprovalState
from turnstream.core.events import ToolCallModeInvoked, TurnEnded
from turnstream.core.inputs import Fact, Tick, WakeAt
from turnstream.runtime import now, run_service, service_bus, source_name, telemetry
from turnstream.runtime.interpreter import run_until_quiet
from turnstream.runtime.mailbox import Delivered, Mailboxes, serve_sessions
from turnstream.settings import Settings

log = logging.getLogger("turnstream.approval")
DURABLE = "approval"
CONSUMES = ("ToolCallModeInvoked", "ToolInvocationProposed", "InteractionAnswered", "TurnEnded")


Item = Delivered | Tick


class ApprovalActor:
    def __init__(self, service: ApprovalService, session_id: str) -> None:
        self.service = service
        self.session_id = session_id
        self.state = ApprovalState(session_id)
        self.loaded = False
        self.timer: asyncio.TimerHandle | None = None

    def busy(self) -> bool:
        return approval.next_deadline(self.state) is not None

    async def failed(self, item: Item) -> None:
        self.loaded = False
        if isinstance(item, Delivered):
            await item.msg.nak(delay=1)
        else:  # a deadline's wake-up: nobody else would bring it back
            self.service.mailboxes.deliver_later(self.session_id, item, 1.0)

    async def handle(self, item: Item) -> None:
        if isinstance(item, Delivered):
            event = item.event
            if not approval.needs_person(event) or (
                not self.loaded and isinstance(event, TurnEnded)
            ):
                # the turn-runner judged it; or a turn's end, with nothing loaded to drop (a
                # later load reads it from the log, not the whole session now, for nothing)
                await item.msg.ack()
                return
            if isinstance(event, ToolCallModeInvoked) and self.loaded:
                # asked about a proposal this session's state has not seen (it was acked
                # unread): read the session again
                self.loaded = approval.knows(self.state, event.data.invocation_id)
        if not self.loaded:
            stored = await self.service.bus.store.read_session(self.session_id)
            self.state = approval.fold(ApprovalState(self.session_id), [s.event for s in stored])
            self.loaded = True
        # one round: an approval decision's one effect (its deadline's timer) has no
        # answer. The timer is set before the ack now: the message is still acked only once
        # the decision is in the log, and a wake-up it brings waits in the inbox until this
        # item is done
        await run_until_quiet(self, item, max_rounds=1)
        if isinstance(item, Delivered):
            await item.msg.ack()

    async def commit(self, item: Item) -> ApprovalDecision:
        """Decide `item` (a fact, or a wake-up) and append what it decides."""
        svc = self.service
        fact = Fact(item.event) if isinstance(item, Delivered) else Tick()
        decision = approval.decide_input(self.state, fact, svc.config, svc.clock(), svc.source)
        if decision.events:
            await svc.bus.store.append_facts(decision.events)
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
        self, bus: Bus, config: ApprovalConfig, *, clock: Callable[[], datetime] = now
    ) -> None:
        self.bus = bus
        self.config = config
        self.clock = clock
        self.source = source_name("approval")
        self.mailboxes: Mailboxes[Item] = Mailboxes(lambda key: ApprovalActor(self, key))

    async def serve(self, stop: asyncio.Event) -> None:
        subjects = self.bus.subjects
        api_sub = await self.bus.nc.subscribe(subjects.api("approval", "pending"), cb=self._pending)
        log.info("approval consuming %s; default mode %s", CONSUMES, self.config.default_mode)
        try:
            await serve_sessions(
                self.bus,
                self.mailboxes,
                DURABLE,
                CONSUMES,
                Delivered.of,
                stop,
                self._resume_open_prompts,
            )
        finally:
            await api_sub.unsubscribe()

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
            self.mailboxes.deliver(session_id, Tick())

    def pending(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """Open prompts, for `turnstream approvals`."""
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
            body = orjson.dumps({"pending": self.pending(query.get("sessionId"))})
        except Exception as exc:
            body = orjson.dumps({"error": f"{type(exc).__name__}: {exc}"})
        await msg.respond(body)


async def serve(settings: Settings, stop: asyncio.Event, bus: Bus | None = None) -> None:
    async with service_bus(settings, "approval", bus) as bus:
        await ApprovalService(bus, settings.approval_config()).serve(stop)


def main() -> None:
    run_service("approval", serve)
