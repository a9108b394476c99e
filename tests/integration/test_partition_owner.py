"""Partition ownership on a real nats-server (`runtime/partitions.py`), with workers that
only record when they run: instances share 4 partitions evenly (2 + 1 + 1 of 3), never one
partition on two at once; one joining takes its share, one stopping hands its partitions
over at once, one dying has them taken once its leases expire."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from tests.polling import eventually
from turnstream.bus import Bus
from turnstream.runtime.leasing import LeasePolicy
from turnstream.runtime.partitions import PartitionOwner

POLICY = LeasePolicy(ttl_s=2, renew_s=0.5, retry_s=0.2, instance_id=None)
PARTITIONS = 4


class Running:
    """Which instance runs a worker for each partition now; fails on two at once."""

    def __init__(self) -> None:
        self.by: dict[int, str] = {}
        self.overlaps: list[tuple[int, str, str]] = []

    def serve(self, name: str) -> Callable[..., object]:
        async def serve(k: int, owns: Callable[[], bool], stop: asyncio.Event) -> None:
            if k in self.by:
                self.overlaps.append((k, self.by[k], name))
            self.by[k] = name
            try:
                await stop.wait()
            finally:
                if self.by.get(k) == name:
                    del self.by[k]

        return serve

    def of(self, name: str) -> set[int]:
        return {k for k, n in self.by.items() if n == name}


@contextlib.asynccontextmanager
async def instance(
    bus: Bus, running: Running, name: str, prefix: str
) -> AsyncIterator[tuple[PartitionOwner, asyncio.Event, asyncio.Task[None]]]:
    owner = PartitionOwner(bus, prefix, POLICY, f"{prefix}/{name}", PARTITIONS)
    stop = asyncio.Event()
    task = asyncio.create_task(owner.run(running.serve(name), stop))  # type: ignore[arg-type]
    try:
        yield owner, stop, task
    finally:
        stop.set()
        if not task.done():
            await task


async def test_instances_share_the_partitions_and_hand_them_over(bus: Bus) -> None:
    running = Running()
    async with instance(bus, running, "a", "share") as (_, _, _):
        await eventually(lambda: running.of("a") == set(range(PARTITIONS)))
        async with instance(bus, running, "b", "share") as (_, b_stop, b_task):
            await eventually(lambda: len(running.of("a")) == 2 and len(running.of("b")) == 2)
            async with instance(bus, running, "c", "share"):
                await eventually(lambda: sorted(len(running.of(n)) for n in "abc") == [1, 1, 2])
            await eventually(lambda: sorted(len(running.of(n)) for n in "ab") == [2, 2])
            loop = asyncio.get_running_loop()
            b_stop.set()
            await b_task
            stopped = loop.time()
            await eventually(lambda: running.of("a") == set(range(PARTITIONS)))
            assert loop.time() - stopped < POLICY.ttl_s  # handed over, not expired
    assert running.overlaps == []


async def test_a_dead_instance_s_partitions_are_taken_once_its_leases_expire(bus: Bus) -> None:
    running = Running()
    async with instance(bus, running, "a", "die") as (_, _, _):
        await eventually(lambda: running.of("a") == set(range(PARTITIONS)))
        async with instance(bus, running, "b", "die") as (_, _, b_task):
            await eventually(lambda: len(running.of("b")) == 2)
            b_task.cancel()  # dies: no hand-over, its leases run out
            with contextlib.suppress(asyncio.CancelledError):
                await b_task
            loop = asyncio.get_running_loop()
            died = loop.time()
            await eventually(lambda: running.of("a") == set(range(PARTITIONS)), timeout=15)
            assert loop.time() - died < POLICY.ttl_s + 4
    assert running.overlaps == []
