"""turn-runner shell: consume the facts a turn reacts to, route them to session actors."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import orjson

from turnstream.agents import load_all
from turnstream.bus import Bus
from turnstream.bus.durables import TURN_RUNNER
from turnstream.bus.full import ALARM
from turnstream.bus.leases import LeaseTable
from turnstream.context import ContextRegistry
from turnstream.core.events import (
    Event,
    SessionConfiguredData,
    StagePostFired,
    StagePreFired,
    unmerged,
)
from turnstream.core.ids import IdFactory
from turnstream.core.inputs import Tick
from turnstream.core.session import SessionState, state_to_json
from turnstream.core.turn import ToolInfo, TurnConfig
from turnstream.hooks import HookCall, HookRegistry
from turnstream.providers import Provider, build_provider
from turnstream.runtime import (
    new_event_id,
    now,
    run_service,
    service_bus,
    source_name,
    telemetry,
    tool_infos,
    watch_hooks,
)
from turnstream.runtime.leased import Served
from turnstream.runtime.leasing import LeasePolicy
from turnstream.runtime.mailbox import Mailboxes
from turnstream.runtime.manifest import watch_tools
from turnstream.settings import Settings
from turnstream.tools import ToolRegistry
from turnstream.turn_runner import snapshots
from turnstream.turn_runner.attachments import AttachmentCache
from turnstream.turn_runner.context import LOADS_IN_FLIGHT, ActorContext, Item
from turnstream.turn_runner.ownership import session_ownership
from turnstream.turn_runner.session import SessionActor

log = logging.getLogger("turnstream.turn_runner")
DURABLE = TURN_RUNNER.name
REACTS_TO = TURN_RUNNER.kinds or ()
"""The event kinds that move a turn forward."""
KNOWN_PATTERNS = 4096
"""Sessions whose `sessions:` pattern is remembered (the oldest are worked out again)."""


class Runner:
    def __init__(
        self,
        bus: Bus,
        provider: Provider,
        turn_config: TurnConfig,
        *,
        hooks: HookRegistry | None = None,
        settings: Settings | None = None,
        context: ContextRegistry | None = None,
        clock: Callable[[], datetime] = now,
        new_id: IdFactory = new_event_id,
    ) -> None:
        self.bus = bus
        self.provider = provider
        self.settings = settings
        self.session_providers: dict[str, tuple[Provider, Settings]] = {}
        self.session_patterns: dict[str, str] = {}
        """Which `sessions:` pattern applies to a session ('' for none), for at most
        `KNOWN_PATTERNS` sessions (the first asked about is forgotten first)."""
        self.session_configs: dict[str, tuple[TurnConfig, TurnConfig]] = {}
        """Per pattern: the base configuration it was made from, and the session's."""
        if turn_config.approval is None:  # the rules the approval service reads too
            rules = (settings or Settings()).approval_config()
            turn_config = replace(turn_config, approval=rules)
        self.base_config = turn_config
        self.hooks = hooks or HookRegistry(nc=bus.nc)
        self.context = context
        self.now = clock
        self.new_id = new_id
        self.source = source_name("turn-runner")
        runner_id = settings.runner_id if settings is not None else None
        self.lease_policy = LeasePolicy.from_settings(settings, runner_id)
        owner = self.lease_policy.owner(self.source)
        self.leases = LeaseTable.on(bus, owner, ttl_s=self.lease_policy.ttl_s)
        """Per-session leases: used when the log is one stream (`ownership.py`)."""
        self.ownership = session_ownership(bus, self.leases, self.lease_policy)
        self.mailboxes: Mailboxes[Item] = Mailboxes(
            lambda key: SessionActor(self.actor_context(), key), gone=self.ownership.forget
        )
        self.loads = asyncio.Semaphore(LOADS_IN_FLIGHT)
        self.attachments = AttachmentCache(self.bus)
        self._snapshots: Any = None
        self.reloaded_events = 0
        """Events read back by reloads (how much snapshots save)."""
        self.tools_digest: str | None = None
        """The digest of the executors' tool manifest in use (None: the local registry's)."""
        self.agent_providers: dict[tuple[str | None, ...], Provider] = {}

    @property
    def turn_config(self) -> TurnConfig:
        """The configuration, following the hooks that are registered right now."""
        hooks = self.hooks
        found = (hooks.has_tool_hooks, hooks.stage_hooks, hooks.workflow_hooks)
        config = self.base_config
        if found != (config.tool_hooks, config.stage_hooks, config.workflow_hooks):
            self.base_config = replace(
                config, tool_hooks=found[0], stage_hooks=found[1], workflow_hooks=found[2]
            )
        return self.base_config

    async def snapshots(self) -> Any:
        """The snapshots bucket (opened once)."""
        if self._snapshots is None:
            self._snapshots = await self.bus.key_value(self.bus.subjects.snapshots_bucket)
        return self._snapshots

    def for_session(self, session_id: str) -> tuple[Provider, TurnConfig]:
        """The provider and turn configuration of a session (`sessions:` overrides).

        Asked several times per event: the pattern of each session and the configuration
        of each pattern are worked out once (again only when the hooks change the base)."""
        config = self.turn_config
        if self.settings is None or not self.settings.sessions:
            return self.provider, config
        pattern = self.session_patterns.get(session_id)
        if pattern is None:
            pattern = self._pattern(session_id)
            if pattern and pattern not in self.session_providers:
                _, settings = self.settings.session_override(session_id)
                traced = telemetry.traced(build_provider(settings))
                self.session_providers[pattern] = (traced, settings)
        if not pattern:
            return self.provider, config
        provider, settings = self.session_providers[pattern]
        base, session_config = self.session_configs.get(pattern, (None, config))
        if base is not config:
            session_config = replace(
                config,
                provider=settings.provider,
                model=settings.model_name,
                offer_tools=settings.tool_calling != "none",
                followup_policy=settings.followup_policy,
            )
            self.session_configs[pattern] = (config, session_config)
        return provider, session_config

    def _pattern(self, session_id: str) -> str:
        """`Settings.session_pattern`, remembered (the first remembered forgotten first)."""
        assert self.settings is not None
        found = self.settings.session_pattern(session_id)
        if len(self.session_patterns) >= KNOWN_PATTERNS:
            del self.session_patterns[next(iter(self.session_patterns))]
        self.session_patterns[session_id] = found
        return found

    def agent_provider(self, agent: SessionConfiguredData) -> Provider | None:
        """The provider of an agent whose profile names a provider, a model or a fallback
        model (built once)."""
        key = (agent.provider, agent.model, agent.fallback_provider, agent.fallback_model)
        if key == (None, None, None, None):
            return None
        if key not in self.agent_providers:
            settings = self.settings or Settings()
            changes: dict[str, object] = {}
            if agent.provider is not None or agent.model is not None:
                changes["model"] = agent.model
            if agent.provider is not None:
                changes["provider"] = agent.provider
            if agent.fallback_model is not None:  # the profile's, else the deployment's
                changes["fallback_model"] = agent.fallback_model
                changes["fallback_provider"] = agent.fallback_provider or agent.provider
                changes["fallback_base_url"] = None
            provider = build_provider(settings.model_copy(update=changes))
            self.agent_providers[key] = telemetry.traced(provider)  # as every other one
        return self.agent_providers[key]

    async def publish_inbound(self, session_id: str, payload: bytes, msg_id: str) -> None:
        """Publish a message to a session on the runtime's own inbound subject (the
        gateway takes only a `message` or an `interrupt` there); `PermissionDenied` when the
        server refuses it."""
        subject = self.bus.subjects.inbound_agent(session_id)
        await self.bus.publish_permitted(subject, payload, headers={"Nats-Msg-Id": msg_id})

    async def close(self) -> None:
        providers = [
            self.provider,
            *(p for p, _ in self.session_providers.values()),
            *self.agent_providers.values(),
        ]
        for provider in providers:
            await provider.close()

    def actor_context(self) -> ActorContext:
        """What a session actor may use of this runner (taken when the actor starts)."""
        return ActorContext(
            store=self.bus.store,
            leases=self.ownership,
            snapshots=self.snapshots,
            now=self.now,
            new_id=self.new_id,
            source=self.source,
            session=self.for_session,
            agent_provider=self.agent_provider,
            publish_inbound=self.publish_inbound,
            hooks=self.hooks,
            deliver=self.mailboxes.deliver,
            deliver_later=self.mailboxes.deliver_later,
            spawn=self.spawn,
            observe=self.observe,
            publish_live=self._publish_live,
            reloaded=self._count_reloaded,
            storage_refused=lambda session: ALARM.refusing(self.bus.subjects.log(session, "*")),
            context=self.context,
            loads=self.loads,
            attachment=self.attachments.get,
        )

    def use_context(self, key: str, value: bytes | None) -> None:
        """A remote context provider registered, changed or left (the hooks bucket)."""
        if self.context is None:
            return
        self.context.set_remote(key, value)
        self.base_config = replace(self.base_config, context_providers=bool(self.context))

    def use_tools(self, tools: tuple[ToolInfo, ...], digest: str) -> None:
        """Offer `tools` from the next model call on: the executors' published manifest
        (built-in, entry-point and MCP tools), which changes when an MCP server's does."""
        if digest != self.tools_digest:
            log.info("tool manifest %s: %d tool(s)", digest[:19], len(tools))
        self.base_config = replace(self.base_config, tools=tools)
        self.tools_digest = digest

    async def _publish_live(self, session_id: str, turn_id: str, delta: bytes) -> None:
        await self.bus.nc.publish(self.bus.subjects.live(session_id, turn_id), delta)

    def _count_reloaded(self, events: int) -> None:
        self.reloaded_events += events

    def has_open_work(self, session_id: str) -> bool:
        """Whether the session's lease must be kept: its actor is about to reload, or has a
        model call in flight, or a turn, input or workflow still open."""
        actor = self.mailboxes.actor(session_id)
        if not isinstance(actor, SessionActor):
            return False
        return not actor.loaded or actor.busy()

    def spawn(self, work: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """A task owned by the runner's task group (cancelled on shutdown)."""
        return self.mailboxes.spawn(work, name)

    def observe(self, events: Sequence[Event]) -> None:
        """Hand appended events to telemetry and stage events to observer hooks; they cannot
        change the turn."""
        telemetry.turn_events(events)
        if not self.hooks.has_observers:
            return
        for event in unmerged(events):  # a merged stage event is the post, then the pre
            if not isinstance(event, StagePreFired | StagePostFired):
                continue
            point = "pre" if isinstance(event, StagePreFired) else "post"
            stage = event.data.stage.value
            if not self.hooks.at(stage, point, {"observer"}):
                continue
            request = HookCall(
                hook="",
                session_id=event.session_id,
                turn_id=event.turn_id,
                stage=stage,
                point=point,
                event=event.model_dump(mode="json", by_alias=True),
            )
            self.spawn(self.hooks.observe(stage, point, request), f"observe:{event.id}")

    async def session_state(self, session_id: str) -> SessionState:
        """The live state if the session is in memory, else rebuilt from the log."""
        actor = self.mailboxes.actor(session_id)
        live = actor if isinstance(actor, SessionActor) and actor.loaded else None
        # a state kept after the lease went (released when idle) is stale once another
        # runner acted for the session (it is reloaded before it is used again)
        if live is not None and self.ownership.holds(session_id):
            return live.state
        last = await self.bus.store.last_seq(session_id)
        if live is not None and live.last_seq >= last:
            return live.state
        kv = await self.snapshots()  # read up to the leader's last, as an actor's reload does
        return (await snapshots.rebuild(kv, self.bus.store, session_id, at_least=last))[0]

    async def serve(self, stop: asyncio.Event) -> None:
        subjects = self.bus.subjects

        api_sub = await self.bus.nc.subscribe(
            subjects.api("turn-runner", "session"), cb=self._answer_session
        )
        log.info(
            "turn-runner %s consuming %s with provider %s",
            self.ownership.owner,
            REACTS_TO,
            self.provider.name,
        )
        served = Served(self.bus, self.mailboxes, TURN_RUNNER, self.has_open_work, self.wake)
        try:
            await self.ownership.serve(served, stop)
        finally:
            await api_sub.unsubscribe()

    def wake(self, session_id: str) -> None:
        """Have the session's actor look at its session again (e.g. take over its lease)."""
        self.mailboxes.deliver(session_id, Tick())

    async def _answer_session(self, msg: Any) -> None:
        try:
            session_id = orjson.loads(msg.data)["sessionId"]
            body = state_to_json(await self.session_state(session_id))
        except Exception as exc:
            body = orjson.dumps({"error": f"{type(exc).__name__}: {exc}"})
        await msg.respond(body)


async def serve(
    settings: Settings,
    stop: asyncio.Event,
    bus: Bus | None = None,
    *,
    tools: ToolRegistry | None = None,
    hooks: HookRegistry | None = None,
    context: ContextRegistry | None = None,
) -> None:
    provider = telemetry.traced(build_provider(settings))
    async with service_bus(settings, "turn-runner", bus) as bus:
        registry = tools or ToolRegistry.load()
        hooks = hooks or HookRegistry.load(bus.nc)
        known = frozenset(load_all(settings.agents)[0])
        context = context if context is not None else ContextRegistry.load(settings, bus.nc)
        config = replace(
            settings.turn_config(),
            tools=tool_infos(registry),
            agents=known,
            context_providers=bool(context),
        )
        runner = Runner(bus, provider, config, hooks=hooks, settings=settings, context=context)
        try:
            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(watch_hooks(bus, hooks, stop, runner.use_context))
                if tools is None:  # given tools are a fixed manifest (tests, embedding)
                    tasks.create_task(watch_tools(bus, runner.use_tools, stop))
                tasks.create_task(runner.serve(stop))
        finally:
            await runner.close()


def main() -> None:
    run_service("turn-runner", serve)
