"""Session leases against a real server: one holder at a time, expiry, renewal, release."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from tests.polling import eventually
from turnstream.bus import Bus
from turnstream.bus.leases import LeaseTable, Ownership
from turnstream.client import message_command
from turnstream.core.turn import TurnConfig
from turnstream.gateway.check import Inbound
from turnstream.gateway.intake import intake
from turnstream.providers import ScriptedProvider, load_script
from turnstream.settings import Settings
from turnstream.turn_runner.app import Runner
from turnstream.turn_runner.ownership import wake_open

pytestmark = pytest.mark.integration


def table(bus: Bus, owner: str, ttl_s: float = 1.0) -> LeaseTable:
    return LeaseTable(bus.js, bus.subjects, owner, ttl_s=ttl_s)


async def until_taken(leases: LeaseTable, session: str, timeout: float = 30) -> Ownership:
    """Keep trying to take the lease (the other holder stopped renewing) until we get it."""
    async with asyncio.timeout(timeout):
        while True:
            got = await leases.ensure(session)
            if got is not Ownership.ELSEWHERE:
                return got
            await asyncio.sleep(0.1)


async def test_one_holder_at_a_time_and_a_lapsed_holder_cannot_renew(bus: Bus) -> None:
    a, b = table(bus, "runner-a"), table(bus, "runner-b")
    assert await a.ensure("hold-1") is Ownership.NEW
    assert await a.ensure("hold-1") is Ownership.KEPT
    assert await b.ensure("hold-1") is Ownership.ELSEWHERE
    assert await a.renew("hold-1")
    # a stops renewing (paused): its lease lapses and b takes it
    assert await until_taken(b, "hold-1") is Ownership.NEW
    assert not a.holds("hold-1")
    assert not await a.renew("hold-1")
    assert await a.ensure("hold-1") is Ownership.ELSEWHERE
    await b.release("hold-1")
    assert await a.ensure("hold-1") is Ownership.NEW


async def test_a_holder_keeps_its_lease_past_the_ttl_by_renewing(bus: Bus) -> None:
    a, b = table(bus, "runner-a"), table(bus, "runner-b")
    assert await a.ensure("hold-2") is Ownership.NEW
    for _ in range(6):  # 3 TTLs
        await asyncio.sleep(0.5)
        assert await a.renew("hold-2")
        assert await b.ensure("hold-2") is Ownership.ELSEWHERE


async def next_of(expired: asyncio.Queue[str], prefix: str) -> str:
    """The next expiry announced for one of this test's sessions (others' leases expire too)."""
    async with asyncio.timeout(30):
        while not (session := await expired.get()).startswith(prefix):
            pass
    return session


async def test_an_expiry_is_announced_and_a_release_is_not(bus: Bus) -> None:
    a, b = table(bus, "runner-a"), table(bus, "runner-b")
    expired: asyncio.Queue[str] = asyncio.Queue()
    stop = asyncio.Event()
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(b.watch_expiries(expired.put_nowait, stop))
        assert await a.ensure("lease-released") is Ownership.NEW
        await a.release("lease-released")
        assert await a.ensure("lease-expiring") is Ownership.NEW
        assert await next_of(expired, "lease-") == "lease-expiring"
        assert await a.ensure("lease-handed") is Ownership.NEW
        await a.release("lease-handed", hand_over=True)
        assert await next_of(expired, "lease-") == "lease-handed"
        stop.set()
    assert await b.ensure("lease-expiring") is Ownership.NEW  # the marker reads as free


async def test_a_session_id_with_a_colon_has_a_valid_kv_key_and_its_expiry_names_it(
    bus: Bus,
) -> None:
    """Session ids may hold `:`, KV keys may not: the lease's key maps it, and back."""
    a, b = table(bus, "runner-a", ttl_s=1.0), table(bus, "runner-b")
    expired: asyncio.Queue[str] = asyncio.Queue()
    stop = asyncio.Event()
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(b.watch_expiries(expired.put_nowait, stop))
        assert await a.ensure("slack:T01:C02") is Ownership.NEW
        kv = await bus.js.key_value(bus.subjects.leases_bucket)
        assert (await kv.get("session.slack=T01=C02")).value == b"runner-a"  # nats-py's key check
        assert await next_of(expired, "slack:") == "slack:T01:C02"
        stop.set()
    assert await b.ensure("slack:T01:C02") is Ownership.NEW


async def test_the_same_runner_id_takes_its_lease_back_at_once(bus: Bus) -> None:
    before = table(bus, "runner-0", ttl_s=60)
    assert await before.ensure("hold-3") is Ownership.NEW
    restarted = table(bus, "runner-0", ttl_s=60)  # the process died; a new one, same name
    assert await restarted.ensure("hold-3") is Ownership.NEW
    assert await table(bus, "runner-1").ensure("hold-3") is Ownership.ELSEWHERE


class GatedProvider:
    """The scripted provider, answering only once `gate` is set."""

    def __init__(self, gate: asyncio.Event) -> None:
        self.inner = ScriptedProvider(load_script(None))
        self.name, self.model, self.gate = "gated", "demo", gate

    async def complete(self, request: Any, on_delta: Any, on_tool_call: Any = None) -> Any:
        await self.gate.wait()
        return await self.inner.complete(request, on_delta, on_tool_call)

    async def close(self) -> None:
        await self.inner.close()


async def test_a_runner_whose_lease_lapsed_lets_the_session_go_instead_of_fighting(
    bus: Bus,
) -> None:
    """Runner a takes a turn to its model call, then stops renewing while its clock stands
    still (a process paused past the TTL believes its lease is valid). Runner b takes the
    session over and finishes the turn. When a's model call returns, its conditional append
    fails and a lets the session go: it appends nothing after b took over."""
    session = "fenced"
    gate = asyncio.Event()
    a = Runner(
        bus, GatedProvider(gate), TurnConfig(), settings=Settings(lease_ttl_s=1, lease_renew_s=0.5)
    )
    b = Runner(bus, ScriptedProvider(load_script(None)), TurnConfig(), settings=Settings())
    a.source, b.source = "turn-runner/a", "turn-runner/b"
    command = orjson.dumps(message_command(session, "hello"))
    inbound = Inbound(session, command, 1, datetime.now(UTC), "TEST")
    await bus.store.append_facts(
        intake(inbound, max_bytes=10_000, now=datetime.now(UTC), source="t")
    )
    stop = asyncio.Event()
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(a.mailboxes.run(stop))
        tasks.create_task(b.mailboxes.run(stop))
        await asyncio.sleep(0)
        a.wake(session)
        await wait_kind(bus, session, "ProviderRequestStarted")
        frozen = a.leases.clock()
        a.leases.clock = lambda: frozen  # a's lease looks valid to a from here on
        assert await until_taken(b.leases, session) is Ownership.NEW
        b.wake(session)
        await wait_kind(bus, session, "SessionTurnEnd")
        gate.set()  # a's model call returns now, long after it lost the lease
        async with asyncio.timeout(30):
            while True:  # a lets go once its append fails
                if session not in a.leases.held:
                    break
                await asyncio.sleep(0.05)
        stop.set()
    await a.close()
    await b.close()
    events = [s.event for s in await bus.store.read_session(session)]
    assert [e.type for e in events].count("TurnEnded") == 1
    first_b = next(i for i, e in enumerate(events) if e.source == "turn-runner/b")
    assert all(e.source != "turn-runner/a" for e in events[first_b:])
    assert events[-1].type == "SessionTurnEnd" and events[-1].source == "turn-runner/b"


async def wait_kind(bus: Bus, session: str, kind: str, timeout: float = 30) -> None:
    async with asyncio.timeout(timeout):
        while True:
            if any(s.event.type == kind for s in await bus.store.read_session(session)):
                return
            await asyncio.sleep(0.05)


async def test_a_session_waiting_long_keeps_its_actor_and_lease_then_is_handed_over(
    bus: Bus, tmp_path: Any
) -> None:
    """An open turn waiting (here for an approval nobody gives) outlives the mailbox's idle
    timeout: its actor, timers and lease stay; a stopping runner hands it over."""
    from dataclasses import replace

    from turnstream.runtime import tool_infos
    from turnstream.runtime.leasing import keep_leases
    from turnstream.tools import ToolRegistry

    script = tmp_path / "s.yaml"
    script.write_text("replies:\n  - tool_calls: [{name: list_dir, arguments: {path: .}}]\n")
    settings = Settings(lease_ttl_s=2, lease_renew_s=0.5, workspace=tmp_path)
    config = replace(settings.turn_config(), tools=tool_infos(ToolRegistry.load()))
    a = Runner(bus, ScriptedProvider(load_script(script)), config, settings=settings)
    a.mailboxes.idle_s = 1.0  # stands for the 300 s default
    watcher = table(bus, "runner-b")
    woken: list[str] = []
    session = "waits-long"
    command = orjson.dumps(message_command(session, "hello"))
    inbound = Inbound(session, command, 1, datetime.now(UTC), "TEST")
    now = datetime.now(UTC)
    await bus.store.append_facts(intake(inbound, max_bytes=10_000, now=now, source="t"))
    stop_a, stop_b = asyncio.Event(), asyncio.Event()
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(a.mailboxes.run(stop_a))
        tasks.create_task(keep_leases(a.leases, a.lease_policy, a.has_open_work, a.wake, stop_a))
        tasks.create_task(watcher.watch_expiries(woken.append, stop_b))
        await asyncio.sleep(0)
        a.wake(session)
        async with asyncio.timeout(20):
            while True:
                kinds = [s.event.type for s in await bus.store.read_session(session)]
                if "ToolInvocationProposed" in kinds:
                    break
                await asyncio.sleep(0.05)
        await asyncio.sleep(3.0)  # three idle timeouts, several renewals
        assert a.mailboxes.actor(session) is not None
        assert a.leases.holds(session)
        stop_a.set()  # a stops: it hands the open session over at once
        async with asyncio.timeout(10):
            while True:
                if session in woken:
                    break
                await asyncio.sleep(0.05)
        stop_b.set()


async def test_a_restart_resumes_open_turns_however_long_the_runners_were_down(
    bus: Bus, tmp_path: Any
) -> None:
    session = "old-open"
    command = orjson.dumps(message_command(session, "hello"))
    inbound = Inbound(session, command, 1, datetime.now(UTC), "TEST")
    now = datetime.now(UTC)
    await bus.store.append_facts(intake(inbound, max_bytes=10_000, now=now, source="t"))
    script = tmp_path / "s.yaml"
    script.write_text("replies:\n  - text: hi\n    delay_ms: 60000\n")  # the call never ends
    first = Runner(bus, ScriptedProvider(load_script(script)), TurnConfig(), settings=Settings())
    stop = asyncio.Event()
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(first.mailboxes.run(stop))
        await asyncio.sleep(0)
        first.wake(session)
        async with asyncio.timeout(20):
            while True:
                kinds = [s.event.type for s in await bus.store.read_session(session)]
                if "ProviderRequestStarted" in kinds:
                    break
                await asyncio.sleep(0.05)
        stop.set()  # the runner dies with the turn open
    woken: list[str] = []
    await wake_open(bus, woken.append)  # what a restarted runner does first: no time limit
    assert session in woken


async def test_a_model_calls_end_that_fails_to_be_handled_is_retried_not_dropped(
    bus: Bus,
) -> None:
    """The runner's own inputs (a model call's end, a wake-up) have no consumer to redeliver
    them: when handling one fails (here the lease check, as a slow KV under load does), the
    actor must retry it, or the turn waits for a result that never comes (issue 18 item 9,
    issue 19 item 1: two runners under load, resumes after a restart)."""
    session = "retried"
    gate = asyncio.Event()
    a = Runner(bus, GatedProvider(gate), TurnConfig(), settings=Settings())
    command = orjson.dumps(message_command(session, "hello"))
    inbound = Inbound(session, command, 1, datetime.now(UTC), "TEST")
    await bus.store.append_facts(
        intake(inbound, max_bytes=10_000, now=datetime.now(UTC), source="t")
    )
    ensure = a.leases.ensure
    failures = 0

    async def flaky_ensure(session_id: str) -> Ownership:
        nonlocal failures
        if gate.is_set() and failures == 0:
            failures += 1
            raise TimeoutError("the lease bucket did not answer in time")
        return await ensure(session_id)

    a.leases.ensure = flaky_ensure  # type: ignore[method-assign]
    stop = asyncio.Event()
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(a.mailboxes.run(stop))
        await asyncio.sleep(0)
        a.wake(session)
        await wait_kind(bus, session, "ProviderRequestStarted")
        gate.set()  # the call ends now; handling its end fails once
        await wait_kind(bus, session, "TurnEnded", timeout=15)
        stop.set()
    await a.close()
    assert failures == 1
    events = [s.event for s in await bus.store.read_session(session)]
    assert [e.type for e in events].count("TurnEnded") == 1


def reads_of(leases: LeaseTable) -> list[str]:
    """Count the key reads `leases` makes (a lease known free is taken by a write alone)."""
    reads: list[str] = []
    latest = leases._latest

    async def counted(session_id: str) -> tuple[int, str | None]:
        reads.append(session_id)
        return await latest(session_id)

    leases._latest = counted  # type: ignore[method-assign]
    return reads


async def test_a_lease_known_free_is_taken_with_one_write_and_a_stale_guess_takes_nothing(
    bus: Bus,
) -> None:
    a, b = table(bus, "runner-a", ttl_s=30), table(bus, "runner-b", ttl_s=30)
    a_reads, b_reads = reads_of(a), reads_of(b)
    stop = asyncio.Event()

    async def b_sees_release_of_a() -> None:
        async with asyncio.timeout(10):
            while True:
                if b.freed.get("free-new") == a.freed["free-new"]:
                    return
                await asyncio.sleep(0.02)

    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(b.watch_expiries(lambda _s: None, stop))
        try:
            assert await a.ensure("free-new") is Ownership.NEW  # never written: no read
            await a.release("free-new")
            assert await a.ensure("free-new") is Ownership.NEW  # our own release: no read
            assert a_reads == []
            await a.release("free-new")
            await b_sees_release_of_a()
            assert await b.ensure("free-new") is Ownership.NEW  # released by another: no read
            assert b_reads == []
            await b.release("free-new")
            stale = b.freed["free-new"]
            assert await a.ensure("free-new") is Ownership.NEW  # a holds it again
        finally:
            stop.set()
    # a guess gone stale (the lease was taken since) is refused, then the key is read
    c = table(bus, "runner-c", ttl_s=30)
    c.freed["free-new"] = stale
    c_reads = reads_of(c)
    assert await c.ensure("free-new") is Ownership.ELSEWHERE
    assert c_reads == ["free-new"]


async def test_namespaces_do_not_collide_and_a_watch_sees_only_its_own(bus: Bus) -> None:
    """The approval service's leases (`approval.<key>`) beside the runner's (`session.<key>`,
    byte for byte as before): both hold the same session, each watch hears only its keys."""
    runner = table(bus, "runner-a", ttl_s=5)
    approval = LeaseTable(bus.js, bus.subjects, "approval-a", ttl_s=5, namespace="approval")
    assert runner.subject("ns:1") == "$KV.ts_leases.session.ns=1"
    assert approval.subject("ns:1") == "$KV.ts_leases.approval.ns=1"
    assert await runner.ensure("ns:1") is Ownership.NEW
    assert await approval.ensure("ns:1") is Ownership.NEW
    heard: dict[str, list[tuple[str, str | None]]] = {"runner": [], "approval": []}
    stop = asyncio.Event()
    async with asyncio.TaskGroup() as tasks:
        for name, leases in (("runner", runner), ("approval", approval)):
            seen = heard[name]
            tasks.create_task(
                leases.watch_expiries(
                    lambda _s: None, stop, lambda s, o, seen=seen: seen.append((s, o))
                )
            )
        # both watches are up once they heard the leases taken before them
        await eventually(lambda: heard["runner"] and heard["approval"])
        await approval.release("ns:1", hand_over=True)
        await eventually(lambda: heard["approval"][-1] == ("ns:1", None))
        await asyncio.sleep(0.3)  # what else the watches would (wrongly) hear
        stop.set()
    assert ("ns:1", "runner-a") in heard["runner"]
    assert all(owner != "approval-a" for _, owner in heard["runner"]), heard
    assert heard["approval"][-1] == ("ns:1", None), heard
    assert all(owner != "runner-a" for _, owner in heard["approval"]), heard
