"""`keep_leases`: leases of sessions with open work or recent use are kept, renewed only
when they would not outlive the round after next; idle ones are released."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field

from turnstream.runtime.leasing import LeasePolicy, keep_leases

POLICY = LeasePolicy(ttl_s=0.1, renew_s=0.03, retry_s=0.2, instance_id=None)
"""The default TTL and renewal (10 s, 3 s) a hundred times faster."""


@dataclass
class Held:
    revision: int
    valid_until: float
    used_at: float


@dataclass
class FakeLeases:
    """A lease table whose clock moves one round each time a round reads it."""

    now: float = 0.0
    held: dict[str, Held] = field(default_factory=dict)
    renewed: list[tuple[float, str]] = field(default_factory=list)
    released: list[tuple[float, str]] = field(default_factory=list)

    def clock(self) -> float:
        self.now += POLICY.renew_s
        return self.now

    def take(self, session: str) -> None:
        self.held[session] = Held(1, self.now + POLICY.ttl_s, self.now)

    async def renew(self, session: str) -> bool:
        self.renewed.append((self.now, session))
        self.held[session].valid_until = self.now + POLICY.ttl_s
        return True

    async def release(self, session: str, *, hand_over: bool = False) -> None:
        self.released.append((self.now, session))
        self.held.pop(session, None)


async def test_a_lease_is_renewed_before_it_could_lapse_and_no_sooner() -> None:
    leases = FakeLeases()
    leases.take("busy")  # open work all along
    leases.take("once")  # one turn, then nothing
    stop = asyncio.Event()

    async def rounds(n: int) -> None:
        async with asyncio.timeout(5):
            while True:
                if len(leases.renewed) >= n:
                    break
                await asyncio.sleep(0.01)
        stop.set()

    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(rounds(4))
        tasks.create_task(
            keep_leases(leases, POLICY, lambda s: s == "busy", lambda _s: None, stop)  # type: ignore[arg-type]
        )
    assert [s for _, s in leases.renewed if s == "once"] == []  # released, never renewed
    assert ("once" in {s for _, s in leases.released}) and leases.released[0][1] == "once"
    busy = [at for at, s in leases.renewed if s == "busy"][:4]
    gaps = [b - a for a, b in itertools.pairwise(busy)]
    assert all(gap > POLICY.renew_s * 1.5 for gap in gaps)  # every other round
    assert all(gap < POLICY.ttl_s for gap in gaps)  # and it never lapsed


async def test_each_idle_lease_released_is_told_so_its_actor_can_go() -> None:
    leases = FakeLeases()
    leases.take("busy")
    leases.take("idle")
    told: list[str] = []
    stop = asyncio.Event()

    async def until_released() -> None:
        async with asyncio.timeout(5):
            while not told:  # noqa: ASYNC110 (a list the rounds append to)
                await asyncio.sleep(0.01)
        stop.set()

    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(until_released())
        tasks.create_task(
            keep_leases(
                leases,  # type: ignore[arg-type]
                POLICY,
                lambda s: s == "busy",
                lambda _s: None,
                stop,
                told.append,
            )
        )
    assert told == ["idle"]  # the session with open work kept its lease (and its actor)
