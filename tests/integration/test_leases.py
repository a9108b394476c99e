"""Session leases against a real server: one holder at a time, expiry, renewal, release."""

from __future__ import annotations

import asyncio

import pytest

from turnstream.bus import Bus
from turnstream.bus.leases import LeaseTable, Ownership

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


async def test_the_same_runner_id_takes_its_lease_back_at_once(bus: Bus) -> None:
    before = table(bus, "runner-0", ttl_s=60)
    assert await before.ensure("hold-3") is Ownership.NEW
    restarted = table(bus, "runner-0", ttl_s=60)  # the process died; a new one, same name
    assert await restarted.ensure("hold-3") is Ownership.NEW
    assert await table(bus, "runner-1").ensure("hold-3") is Ownership.ELSEWHERE
