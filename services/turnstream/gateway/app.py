"""gateway shell: inbound commands handed over by a push consumer, taken in batches (what
came while the last batch was appended). Each batch goes through the pure decider
(`decider.decide_intake`) driven by the shared interpreter (`run_until_quiet`): the decider
asks, this shell answers (a log read, the object store, the idempotency keys' claims), the
batch's events are appended, then its commands acked."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import replace
from typing import Any, assert_never

from turnstream import agents
from turnstream.bus import Bus
from turnstream.bus.appender import LogFull
from turnstream.bus.consume import BATCH, kept_in_progress
from turnstream.bus.durables import GATEWAY
from turnstream.bus.full import backoff_s
from turnstream.bus.kv import KvWrites
from turnstream.bus.retry import retried, stoppable
from turnstream.core.events import EventBase, InputRejected, SessionConfigured
from turnstream.core.subjects import Subjects
from turnstream.core.workflow.definition import WorkflowDef
from turnstream.gateway.check import Inbound
from turnstream.gateway.decider import (
    AgentIs,
    Arrived,
    AttachmentsStored,
    Claimed,
    ClaimKeys,
    Effect,
    Input,
    IntakeDecision,
    IntakeState,
    Requested,
    decide_intake,
)
from turnstream.gateway.dedup import first_times
from turnstream.gateway.intake import AskAgent, AskRequested, IntakeConfig, StoreAttachments
from turnstream.gateway.lookups import session_agent, stored, was_requested
from turnstream.runtime import now, run_service, service_bus, source_name, telemetry
from turnstream.runtime.interpreter import Interpreted, run_until_quiet
from turnstream.settings import Settings
from turnstream.tools.registry import ToolRegistry
from turnstream.workflows.loader import attachable

log = logging.getLogger("turnstream.gateway")
DURABLE = GATEWAY.name
ACK_WAIT_S = GATEWAY.ack_wait_s
"""A command not acked this long is redelivered: how long a sender waits for its
`InputAccepted` when the gateway holding the command died (a live gateway keeps its batch
with in-progress acks however long the append takes)."""
IN_HAND = GATEWAY.max_ack_pending
"""Commands the server hands over before earlier ones are acked: a backlog (a gateway
restarted after a while) comes in what is appended well within `ACK_WAIT_S`, not all at
once to wait in memory past it and come again."""
KNOWN_AGENTS = 4096
"""Sessions whose agent the gateway remembers (not every agent session it ever saw)."""


async def serve(
    settings: Settings,
    stop: asyncio.Event,
    bus: Bus | None = None,
    tools: ToolRegistry | None = None,
) -> None:
    """Consume `<prefix>.in.>` until `stop` is set."""
    async with service_bus(settings, "gateway", bus) as bus:
        bucket = bus.subjects.idempotency_bucket
        opened = retried(f"bucket {bucket}", lambda: bus.existing_bucket(bucket))
        claims = await stoppable(opened, stop)  # NATS slow: asked again until it answers
        if claims is None:
            return  # stopped before NATS answered
        await Gateway(settings, bus, tools, claims).consume(stop)


def intake_config(settings: Settings, tools: ToolRegistry | None) -> IntakeConfig:
    """What the decider reads commands with: the limits and the profile and workflow
    loaders over the deployment's files."""
    live_tools = (tools or ToolRegistry.load()).names()

    def load_workflow(session_id: str, name: str) -> WorkflowDef:
        tool_calling = settings.session_override(session_id)[1].tool_calling
        return attachable(settings.workflows, name, live_tools, tool_calling, settings.mcp.servers)

    def load_agent(name: str) -> agents.AgentProfile:
        profile = agents.load(agents.find(settings.agents, name))
        if profile.provider is not None and profile.model is None:
            # its provider's default model, recorded: a replay needs no settings either
            other = settings.model_copy(update={"provider": profile.provider, "model": None})
            profile = replace(profile, model=other.model_name)
        return profile

    policy = settings.attachment_policy()
    return IntakeConfig(
        settings.max_input_bytes, source_name("gateway"), load_workflow, load_agent, policy
    )


def inbound(subjects: Subjects, msg: Any) -> Inbound:
    """A delivered inbound message as the decider reads it."""
    meta = msg.metadata
    return Inbound(
        session_token=subjects.session_from_inbound(msg.subject),
        data=msg.data,
        seq=meta.sequence.stream,
        stored_at=meta.timestamp,
        stream=subjects.inbound_stream,
        msg_id=(msg.headers or {}).get("Nats-Msg-Id"),
        door=subjects.door_of(msg.subject),
    )


class Gateway:
    """The shell: answers the decider's questions, appends its batches, acks them."""

    def __init__(
        self, settings: Settings, bus: Bus, tools: ToolRegistry | None, claims: Any
    ) -> None:
        self.bus = bus
        self.config = intake_config(settings, tools)
        self.claims = claims
        self.claimer = KvWrites(bus.store.appender, bus.subjects.idempotency_bucket)
        self.agents: dict[str, str] = {}
        """Agents of at most `KNOWN_AGENTS` sessions, the first seen forgotten first (a
        session's agent never changes; one forgotten is read from the log again)."""

    def know(self, session_id: str, agent: str) -> None:
        if session_id not in self.agents and len(self.agents) >= KNOWN_AGENTS:
            del self.agents[next(iter(self.agents))]  # the oldest
        self.agents[session_id] = agent

    async def agent_of(self, session_id: str) -> str | None:
        if session_id not in self.agents:
            found = await session_agent(self.bus, session_id)
            if found is None:
                return None
            self.know(session_id, found)
        return self.agents[session_id]

    async def answer(self, effect: Effect) -> Input:
        """What the decider asked, found out."""
        match effect:
            case AskRequested(session_id, interaction_id):
                return Requested(await was_requested(self.bus, session_id, interaction_id))
            case AskAgent(session_id):
                return AgentIs(await self.agent_of(session_id))
            case StoreAttachments(attachments):
                return AttachmentsStored(await stored(self.bus, attachments))
            case ClaimKeys(claims):
                firsts = await first_times(self.claimer, self.claims, claims)
                return Claimed(tuple(firsts))
            case _:
                assert_never(effect)

    async def intake(self, msgs: list[Any]) -> tuple[EventBase, ...]:
        """The batch decided and its events appended: the events."""
        batch = _Batch(self)
        actor: Interpreted[Input, Effect] = batch
        arrived = Arrived(tuple(inbound(self.bus.subjects, msg) for msg in msgs))
        # a round per question and per claim: at most four a command
        await run_until_quiet(actor, arrived, max_rounds=4 * len(msgs) + 2)
        if not batch.state.settled:
            raise RuntimeError(f"the batch of {len(msgs)} commands was not settled")
        for event in batch.appended:
            match event:
                case SessionConfigured():
                    self.know(event.session_id, event.data.agent)
                case InputRejected() if event.data.kind == "intake_failed":
                    log.error("inbound seq %d: %s", event.data.inbound_seq, event.data.reason)
        return batch.appended

    async def on_batch(self, msgs: list[Any], behind: list[Any], stop: asyncio.Event) -> None:
        """Append what the batch decides and ack it; a full log keeps it (and what came
        `behind` it) unacked, tried again with backoff until `stop`."""
        refusals = 0
        while True:
            try:
                with kept_in_progress(msgs, ACK_WAIT_S):
                    events = await self.intake(msgs)
                break
            except LogFull:
                # the store is full: these commands stay stored and unacked, and so does
                # what came behind them (their order kept), until space is freed; tried
                # again with backoff (the alarm logged it once at ERROR)
                refusals += 1
                with kept_in_progress(msgs, ACK_WAIT_S), kept_in_progress(behind, ACK_WAIT_S):
                    if await _stopped(stop, backoff_s(refusals)):
                        return  # unacked: another gateway, or this one restarted, takes them
            except Exception:
                log.exception("intake or append failed; the commands will be redelivered")
                return
        telemetry.accepted(events)
        for msg in msgs:
            await msg.ack()

    async def consume(self, stop: asyncio.Event) -> None:
        """Take what the push consumer hands over, a batch at a time, until `stop`."""
        subjects = self.bus.subjects
        arrived: list[Any] = []
        woken = asyncio.Event()

        async def on_msg(msg: Any) -> None:
            arrived.append(msg)
            woken.set()

        stopping = asyncio.ensure_future(stop.wait())
        stopping.add_done_callback(lambda _: woken.set())
        binding = self.bus.bind_push(GATEWAY, subjects.inbound_stream, None, on_msg)
        sub = await stoppable(binding, stop)  # NATS slow: asked again until it answers
        if sub is None:
            stopping.cancel()
            return
        log.info("gateway consuming %s", subjects.inbound_all)
        try:
            while not stop.is_set():
                await woken.wait()
                if stop.is_set():
                    break
                msgs = arrived[:BATCH]
                del arrived[:BATCH]
                if not arrived:
                    woken.clear()
                if msgs:
                    await self.on_batch(msgs, arrived, stop)
        finally:
            stopping.cancel()
            await sub.unsubscribe()


class _Batch:
    """One batch as the interpreter drives it: commit decides and appends, perform asks."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.state = IntakeState()
        self.appended: tuple[EventBase, ...] = ()

    async def commit(self, item: Input) -> IntakeDecision:
        decision = decide_intake(self.state, item, self.gateway.config, now())
        self.state = decision.state
        if decision.events:
            await self.gateway.bus.store.append_facts(decision.events)
            self.appended = decision.events
        return decision

    async def perform(self, effects: tuple[Effect, ...]) -> Input | None:
        for effect in effects:  # a decision asks one thing at most
            return await self.gateway.answer(effect)
        return None


async def _stopped(stop: asyncio.Event, seconds: float) -> bool:
    """Wait `seconds` or until `stop` is set; whether it is."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stop.wait()
    return stop.is_set()


def main() -> None:
    run_service("gateway", serve)
