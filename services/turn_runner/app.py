"""turn-runner shell: consume the facts a turn reacts to, route them to session actors."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

import orjson
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import api

from turnstream.bus import Bus
from turnstream.core.events import decode
from turnstream.core.ids import IdFactory
from turnstream.core.turn import SessionState, TurnConfig, fold, state_to_json
from turnstream.providers import Provider, build_provider
from turnstream.runtime import connect_service, new_event_id, now, run_service, source_name
from turnstream.settings import Settings
from turnstream.turn_runner.session import Delivered, SessionActor

log = logging.getLogger("turnstream.turn_runner")
DURABLE = "turn-runner"
REACTS_TO = ("InputAccepted",)
"""The event kinds that move a turn forward (more arrive with tools and approvals)."""
BATCH = 256


class Runner:
    def __init__(
        self,
        bus: Bus,
        provider: Provider,
        turn_config: TurnConfig,
        *,
        clock: Callable[[], datetime] = now,
        new_id: IdFactory = new_event_id,
    ) -> None:
        self.bus = bus
        self.provider = provider
        self.turn_config = turn_config
        self.now = clock
        self.new_id = new_id
        self.source = source_name("turn-runner")
        self.sessions: dict[str, SessionActor] = {}
        self._tasks: asyncio.TaskGroup | None = None

    def actor(self, session_id: str) -> SessionActor:
        actor = self.sessions.get(session_id)
        if actor is None or actor.closed:
            assert self._tasks is not None
            actor = SessionActor(self, session_id)
            self.sessions[session_id] = actor
            self._tasks.create_task(self._run_actor(actor), name=f"session:{session_id}")
        return actor

    async def _run_actor(self, actor: SessionActor) -> None:
        try:
            await actor.run()
        finally:
            if actor.provider_task is not None:
                actor.provider_task.cancel()
            if self.sessions.get(actor.session_id) is actor:
                del self.sessions[actor.session_id]

    async def session_state(self, session_id: str) -> SessionState:
        """The live state if the session is in memory, else rebuilt from the log."""
        actor = self.sessions.get(session_id)
        if actor is not None and actor.loaded:
            return actor.state
        stored = await self.bus.store.read_session(session_id)
        return fold(SessionState(session_id), [s.event for s in stored])

    async def serve(self, stop: asyncio.Event) -> None:
        subjects = self.bus.subjects
        config = api.ConsumerConfig(
            durable_name=DURABLE,
            filter_subjects=[subjects.log_kind(kind) for kind in REACTS_TO],
            ack_policy=api.AckPolicy.EXPLICIT,
            ack_wait=60,
            max_ack_pending=20_000,
        )
        await self.bus.js.add_consumer(subjects.log_stream, config=config)
        sub = await self.bus.js.pull_subscribe_bind(DURABLE, stream=subjects.log_stream)
        api_sub = await self.bus.nc.subscribe(
            subjects.api("turn-runner", "session"), cb=self._answer_session
        )
        log.info("turn-runner consuming %s with provider %s", REACTS_TO, self.provider.name)
        try:
            async with asyncio.TaskGroup() as tasks:
                self._tasks = tasks
                while not stop.is_set():
                    try:
                        msgs = await sub.fetch(BATCH, timeout=0.5)
                    except (TimeoutError, NatsTimeoutError):
                        continue
                    except NatsError as exc:  # disconnected: nats-py reconnects, we retry
                        log.warning("fetch failed (%s); retrying", exc)
                        await asyncio.sleep(0.5)
                        continue
                    for msg in msgs:
                        event = decode(msg.data)
                        seq = msg.metadata.sequence.stream
                        self.actor(event.session_id).deliver(Delivered(msg, seq, event))
                raise _Stopped
        except* _Stopped:
            pass
        finally:
            await api_sub.unsubscribe()
            await sub.unsubscribe()

    async def _answer_session(self, msg: Any) -> None:
        try:
            session_id = orjson.loads(msg.data)["sessionId"]
            body = state_to_json(await self.session_state(session_id))
        except Exception as exc:
            body = orjson.dumps({"error": f"{type(exc).__name__}: {exc}"})
        await msg.respond(body)


class _Stopped(Exception):
    """Raised inside the task group to cancel the session actors on shutdown."""


async def serve(settings: Settings, stop: asyncio.Event, bus: Bus | None = None) -> None:
    provider = build_provider(settings.provider, script=settings.script, model=settings.model)
    own_bus = bus is None
    bus = bus or await connect_service(settings, "turn-runner")
    try:
        await Runner(bus, provider, settings.turn_config()).serve(stop)
    finally:
        if own_bus:
            await bus.close()


def main() -> None:
    run_service("turn-runner", serve)
