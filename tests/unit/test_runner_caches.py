"""What the turn-runner remembers per session is bounded, whatever number of sessions it sees."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from turnstream.core.events import SessionConfiguredData
from turnstream.core.inputs import Tick, WakeAt
from turnstream.core.session.decider import Providers, TimeTurns
from turnstream.core.subjects import Subjects
from turnstream.core.turn import TurnConfig
from turnstream.providers import ScriptedProvider, load_script
from turnstream.settings import Settings
from turnstream.turn_runner import app, session
from turnstream.turn_runner.app import Runner
from turnstream.turn_runner.session import SessionActor


def test_the_sessions_patterns_are_remembered_for_a_bounded_number_of_sessions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(app, "KNOWN_PATTERNS", 10)
    settings = Settings(
        provider="scripted", sessions={"vip-*": {"max_tokens": 100}, "*-x": {"model": "m"}}
    )
    bus = SimpleNamespace(js=None, nc=None, subjects=Subjects())
    runner = Runner(bus, ScriptedProvider(load_script(None)), TurnConfig(), settings=settings)  # type: ignore[arg-type]
    base = runner.provider
    for n in range(50):
        vip, plain = runner.for_session(f"vip-{n}-x")[0], runner.for_session(f"s-{n}")[0]
        assert vip is not base and plain is base  # the first pattern that matches wins
    assert len(runner.session_patterns) <= 10
    assert list(runner.session_providers) == ["vip-*"]  # built once, not per session
    assert runner.for_session("vip-0-x")[0] is runner.for_session("vip-49-x")[0]
    assert runner.for_session("a-x")[0] is runner.session_providers["*-x"][0]


def _timed_actor() -> tuple[SessionActor, list[asyncio.TimerHandle], list[object]]:
    """An actor whose timers are real loop timers; what they deliver is recorded."""
    loop = asyncio.get_running_loop()
    timers: list[asyncio.TimerHandle] = []
    delivered: list[object] = []

    def deliver_later(key: str, item: object, delay_s: float) -> asyncio.TimerHandle:
        timers.append(loop.call_later(delay_s, delivered.append, item))
        return timers[-1]

    ctx: Any = SimpleNamespace(
        deliver_later=deliver_later,
        session=lambda _: (None, TurnConfig(max_turn_seconds=600)),
        now=lambda: datetime.now(UTC),
        leases=None,  # never asked: these tests hand the actor no delivery
    )
    return SessionActor(ctx, "s-1"), timers, delivered


async def test_a_turns_wall_time_timer_goes_once_no_turn_is_live(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    actor, timers, delivered = _timed_actor()
    await actor.perform([Providers(frozenset({"t1"}), ()), TimeTurns(frozenset({"t1"}))])
    await actor.perform(
        [Providers(frozenset({"t1", "t2"}), ()), TimeTurns(frozenset({"t1", "t2"}))]
    )
    assert len(timers) == 2 and not any(t.cancelled() for t in timers)
    await actor.perform([Providers(frozenset(), ())])  # the turns ended
    assert all(t.cancelled() for t in timers)  # a finished session keeps no timer
    monkeypatch.setattr(session, "RETRY_S", 0.01)
    await actor.failed(Tick())  # our own input failed: it must still come back
    await asyncio.sleep(0.05)
    assert delivered == [Tick()]


async def test_a_session_let_go_keeps_no_wall_time_timer() -> None:
    actor, timers, _ = _timed_actor()
    await actor.perform([Providers(frozenset({"t1"}), ()), TimeTurns(frozenset({"t1"}))])
    await actor.let_go(Tick())
    assert timers[0].cancelled()
    await actor.perform([Providers(frozenset({"t1"}), ()), TimeTurns(frozenset({"t1"}))])
    assert len(timers) == 2 and not timers[1].cancelled()  # taken again: timed again


def test_an_agents_own_provider_is_traced_like_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    traced: list[object] = []
    monkeypatch.setattr(app.telemetry, "traced", lambda p: traced.append(p) or p)
    bus = SimpleNamespace(js=None, nc=None, subjects=Subjects())
    runner = Runner(bus, ScriptedProvider(load_script(None)), TurnConfig(), settings=Settings())  # type: ignore[arg-type]
    agent = SessionConfiguredData(agent="a", provider="scripted", idempotency_key="k")
    provider = runner.agent_provider(agent)
    assert provider is not None and traced == [provider]
    assert runner.agent_provider(agent) is provider and len(traced) == 1  # built once


async def test_a_wake_up_no_longer_asked_keeps_no_timer() -> None:
    actor, timers, _ = _timed_actor()
    idle = Providers(frozenset(), ())
    soon = datetime.now(UTC) + timedelta(seconds=300)  # say a sub-turn's deadline
    await actor.perform([idle, WakeAt(soon)])
    await actor.perform([idle, WakeAt(soon)])  # asked again: the same timer
    assert len(timers) == 1
    await actor.perform([idle, WakeAt(soon - timedelta(seconds=100))])  # an earlier one first
    assert len(timers) == 2 and timers[0].cancelled() and not timers[1].cancelled()
    await actor.perform([idle])  # nothing to wake for (the child ended)
    assert timers[1].cancelled()
    await actor.perform([idle, WakeAt(soon)])  # asked again later: timed again
    assert len(timers) == 3 and not timers[2].cancelled()
    await actor.let_go(Tick())
    assert timers[2].cancelled()
