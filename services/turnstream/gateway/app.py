"""gateway shell: inbound commands handed over by a push consumer, taken in batches (what
came while the last batch was appended); their keys claimed, what `intake` decides
appended, then acked."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import replace
from typing import Any

from turnstream import agents
from turnstream.bus import Bus
from turnstream.bus.appender import LogFull
from turnstream.bus.consume import BATCH, bind_push, kept_in_progress
from turnstream.bus.durables import GATEWAY
from turnstream.bus.full import backoff_s
from turnstream.bus.kv import KvWrites
from turnstream.bus.retry import retried, stoppable
from turnstream.bus.scan import scan_log
from turnstream.bus.streams import existing_bucket
from turnstream.core.events import (
    EventBase,
    InputAccepted,
    InputRejected,
    InteractionAnswered,
    InteractionRequested,
    SessionConfigured,
    decode,
)
from turnstream.core.workflow.definition import WorkflowDef
from turnstream.gateway.attachments import with_attachments_stored
from turnstream.gateway.check import Inbound
from turnstream.gateway.dedup import first_times
from turnstream.gateway.intake import intake, reject_unknown_answer, settle_agent
from turnstream.runtime import now, run_service, service_bus, source_name, telemetry
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
        await _consume(settings, stop, bus, tools)


async def _consume(
    settings: Settings, stop: asyncio.Event, bus: Bus, tools: ToolRegistry | None
) -> None:
    subjects, source = bus.subjects, source_name("gateway")
    live_tools = (tools or ToolRegistry.load()).names()
    policy = settings.attachment_policy()

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

    session_agents: dict[str, str] = {}
    """Agents of at most `KNOWN_AGENTS` sessions, the first seen forgotten first (a
    session's agent never changes; one forgotten is read from the log again)."""

    def know(session_id: str, agent: str) -> None:
        if session_id not in session_agents and len(session_agents) >= KNOWN_AGENTS:
            del session_agents[next(iter(session_agents))]  # the oldest
        session_agents[session_id] = agent

    async def agent_of(session_id: str) -> str | None:
        if session_id not in session_agents:
            found = await _session_agent(bus, session_id)
            if found is None:
                return None
            know(session_id, found)
        return session_agents[session_id]

    async def decide(msg: Any) -> tuple[int, list[EventBase]]:
        """The message's inbound sequence and the events it amounts to, its key unclaimed."""
        meta = msg.metadata
        raw = Inbound(
            session_token=subjects.session_from_inbound(msg.subject),
            data=msg.data,
            seq=meta.sequence.stream,
            stored_at=meta.timestamp,
            stream=subjects.inbound_stream,
            msg_id=(msg.headers or {}).get("Nats-Msg-Id"),
            door=subjects.door_of(msg.subject),
        )
        decided = intake(
            raw,
            max_bytes=settings.max_input_bytes,
            now=now(),
            source=source,
            load_workflow=load_workflow,
            load_agent=load_agent,
            attachments=policy,
        )
        match decided:
            case [InputRejected(data=data), *_] if data.kind == "intake_failed":
                log.error("inbound seq %d: %s", raw.seq, data.reason)
            case [InteractionAnswered() as answered] if not await _was_requested(bus, answered):
                decided = reject_unknown_answer(raw, answered, now=now(), source=source)
            case [SessionConfigured() as configured, *_]:
                current = await agent_of(configured.session_id)
                decided = settle_agent(raw, decided, current, now=now(), source=source)
        if isinstance(decided[-1], InputAccepted) and decided[-1].data.attachments:
            decided = await with_attachments_stored(bus, raw, decided, now=now(), source=source)
        return raw.seq, decided

    async def settle(chunk: list[tuple[int, list[EventBase]]]) -> list[EventBase]:
        """The chunk's events but those of a key its session already used (their first
        command's events answer): every accepted command's key claimed in one flight."""
        claimed = [(seq, d) for seq, d in chunk if not isinstance(d[0], InputRejected)]
        keys = [(d[0].session_id, d[0].correlation_id, seq) for seq, d in claimed]
        firsts = dict(zip(keys, await first_times(claimer, claims, keys), strict=True))
        events: list[EventBase] = []
        for seq, decided in chunk:
            first = decided[0]
            if (
                isinstance(first, InputRejected)
                or firsts[first.session_id, first.correlation_id, seq]
            ):
                if isinstance(first, SessionConfigured):
                    know(first.session_id, first.data.agent)
                events += decided
        return events

    async def decide_all(msgs: list[Any]) -> list[EventBase]:
        """Each message decided, keys claimed per chunk: a chunk ends before a second
        message configuring a session's agent, which must see whether the first did."""
        events: list[EventBase] = []
        chunk: list[tuple[int, list[EventBase]]] = []
        configuring: set[str] = set()
        for msg in msgs:
            seq, decided = await decide(msg)
            first = decided[0]
            if isinstance(first, SessionConfigured) and first.session_id in configuring:
                events += await settle(chunk)
                chunk, configuring = [], set()
                seq, decided = await decide(msg)
                first = decided[0]
            if isinstance(first, SessionConfigured):
                configuring.add(first.session_id)
            chunk.append((seq, decided))
        return events + await settle(chunk)

    async def on_batch(msgs: list[Any]) -> None:
        refusals = 0
        while True:
            try:
                with kept_in_progress(msgs, ACK_WAIT_S):
                    events = await decide_all(msgs)
                    await bus.store.append_facts(events)
                break
            except LogFull:
                # the store is full: these commands stay stored and unacked, and so does
                # what came behind them (their order kept), until space is freed; tried
                # again with backoff (the alarm logged it once at ERROR)
                refusals += 1
                with kept_in_progress(msgs, ACK_WAIT_S), kept_in_progress(arrived, ACK_WAIT_S):
                    if await _stopped(stop, backoff_s(refusals)):
                        return  # unacked: another gateway, or this one restarted, takes them
            except Exception:
                log.exception("intake or append failed; the commands will be redelivered")
                return
        telemetry.accepted(events)
        for msg in msgs:
            await msg.ack()

    bucket = subjects.idempotency_bucket
    opened = retried(f"bucket {bucket}", lambda: existing_bucket(bus.js, bucket))
    claims = await stoppable(opened, stop)  # NATS slow: asked again until it answers
    if claims is None:
        return  # stopped before NATS answered
    claimer = KvWrites(bus.store.appender, bucket)
    arrived: list[Any] = []
    woken = asyncio.Event()

    async def on_msg(msg: Any) -> None:
        arrived.append(msg)
        woken.set()

    stopping = asyncio.ensure_future(stop.wait())
    stopping.add_done_callback(lambda _: woken.set())
    binding = bind_push(bus.js, subjects, GATEWAY, subjects.inbound_stream, None, on_msg)
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
                await on_batch(msgs)
    finally:
        stopping.cancel()
        await sub.unsubscribe()


async def _stopped(stop: asyncio.Event, seconds: float) -> bool:
    """Wait `seconds` or until `stop` is set; whether it is."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stop.wait()
    return stop.is_set()


ANSWER_RECHECKS_S = (0.25, 0.5, 1.0)
"""Pauses before an answer's interaction is looked for again, before the answer is rejected.
On a cluster a client may have read the prompt from a replica that applied it before the
one this read is answered by (seen under load at R3: an answer to a prompt stored 120 ms
earlier rejected as unknown, its turn then waiting out the prompt's deadline)."""


async def _was_requested(bus: Bus, answered: InteractionAnswered) -> bool:
    """Whether the answer's session asked the interaction it answers (its log holds the
    InteractionRequested), looked for again after each of `ANSWER_RECHECKS_S` while it is
    not found; an answer is rare, so a few filtered reads of the log are cheap."""
    for pause in (0.0, *ANSWER_RECHECKS_S):
        await asyncio.sleep(pause)
        if await _requested_now(bus, answered):
            return True
    return False


async def _requested_now(bus: Bus, answered: InteractionAnswered) -> bool:
    wanted = answered.data.interaction_id
    found = False

    def on_event(_seq: int, _subject: str, data: bytes) -> None:
        nonlocal found
        event = decode(data)
        found = found or (
            isinstance(event, InteractionRequested) and event.data.interaction_id == wanted
        )

    subjects = bus.subjects
    subject = subjects.log(answered.session_id, "InteractionRequested")
    stream = subjects.log_stream_of(answered.session_id)
    await scan_log(bus.js, subjects, on_event, subject=subject, stream=stream)
    return found


async def _session_agent(bus: Bus, session_id: str) -> str | None:
    """The agent the session's log configured (its first `SessionConfigured`), if any."""
    found: list[str] = []

    def on_event(_seq: int, _subject: str, data: bytes) -> None:
        event = decode(data)
        if isinstance(event, SessionConfigured) and not found:
            found.append(event.data.agent)

    subject = bus.subjects.log(session_id, "SessionConfigured")
    stream = bus.subjects.log_stream_of(session_id)
    await scan_log(bus.js, bus.subjects, on_event, subject=subject, stream=stream)
    return found[0] if found else None


def main() -> None:
    run_service("gateway", serve)
