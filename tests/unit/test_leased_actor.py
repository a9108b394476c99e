"""`runtime/leased.LeasedActor`: the lease handling the turn-runner's and the approval
service's actors share (each keeps only its step)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from turnstream.bus.appender import LogFull
from turnstream.bus.leases import Ownership
from turnstream.runtime.leased import LeasedActor, LeaseLost
from turnstream.runtime.mailbox import Delivered


class Lease:
    owner, retry_s = "me", 0.25

    def __init__(self, *answers: Ownership, held: bool = True) -> None:
        self.answers = list(answers)
        self.held = held

    def holds(self, session_id: str) -> bool:
        return self.held

    async def ensure(self, session_id: str) -> Ownership:
        return self.answers.pop(0)


class Msg:
    def __init__(self) -> None:
        self.naks: list[float] = []

    async def nak(self, delay: float = 0) -> None:
        self.naks.append(delay)


class Actor(LeasedActor[Any]):
    def __init__(self, lease: Lease, fails: BaseException | None = None) -> None:
        self.session_id, self.lease, self.loaded, self.refusals = "s1", lease, True, 0
        self.fails = fails
        self.stepped: list[tuple[object, bool]] = []
        self.unloaded = 0
        self.later_items: list[tuple[object, float]] = []

    async def step(self, item: Any) -> None:
        self.stepped.append((item, self.loaded))
        if self.fails is not None:
            raise self.fails

    def unload(self) -> None:
        self.unloaded += 1

    def later(self, item: Any, delay_s: float) -> object:
        self.later_items.append((item, delay_s))
        return None


def delivery() -> Delivered:
    return Delivered(Msg(), 7, SimpleNamespace(type="InputAccepted"))  # type: ignore[arg-type]


async def test_kept_steps_on_memory_new_reloads_elsewhere_lets_go_with_the_bounce_delay() -> None:
    actor = Actor(Lease(Ownership.KEPT, Ownership.NEW, Ownership.ELSEWHERE))
    assert await actor.leased("a") and actor.stepped == [("a", True)]
    assert await actor.leased("b") and actor.stepped[-1] == ("b", False)  # read the log again
    actor.loaded = True
    item = delivery()
    assert await actor.leased(item)
    assert len(actor.stepped) == 2 and not actor.loaded and actor.unloaded == 1
    assert item.msg.naks == [Lease.retry_s]


async def test_a_lease_lost_in_a_step_lets_go_and_a_full_log_backs_off() -> None:
    actor = Actor(Lease(Ownership.KEPT), fails=LeaseLost("s1"))
    item = delivery()
    await actor.leased(item)
    assert actor.unloaded == 1 and item.msg.naks == [Lease.retry_s]
    full = Actor(Lease(Ownership.KEPT, Ownership.KEPT), fails=LogFull(10077, "full"))
    assert not await full.leased("tick") and not full.loaded and full.refusals == 1
    assert not await full.leased("tick") and full.refusals == 2
    first, second = (delay for _, delay in full.later_items)
    assert second > first  # backing off, never dropped


async def test_taken_again_before_an_append() -> None:
    assert await Actor(Lease(Ownership.NEW, held=False)).take_again() is True
    assert await Actor(Lease(Ownership.KEPT, held=False)).take_again() is False
    with pytest.raises(LeaseLost):
        await Actor(Lease(Ownership.ELSEWHERE, held=False)).take_again()
