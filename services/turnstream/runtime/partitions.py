"""Owning partitions of the log: the shell around `core/ownership.py` for a service whose
instances split the partitions between them (the audit), one worker per partition held.

Two kinds of lease in the leases bucket, both `bus/leases.LeaseTable`s kept by
`runtime/leasing.keep_leases`:

    <service>.part.<k>         partition k's holder (its worker runs only there)
    <service>.member.<id>      one per live instance: how many share the partitions

Each round (every `renew_s`, or at once when a watch sees a lease change) applies
`rebalance` to what the watches show (who is alive, who holds what): stop the workers of
partitions whose lease was lost, release the surplus (worker stopped first, then the
lease handed over, marked as an expiry would be, so the joining instance takes it at
once), take free partitions up to the target (a conditional lease write: a lost race
takes nothing). On stop: every worker stopped, then every lease
handed over. An instance killed stops renewing: its partitions are free once their
leases expire (`TURNSTREAM_LEASE_TTL_S`), and the others take them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from functools import partial

from turnstream.bus import Bus
from turnstream.bus.appender import LogFull
from turnstream.bus.leases import LeaseTable, Ownership
from turnstream.core.ownership import rebalance
from turnstream.runtime.leasing import LeasePolicy, keep_leases

log = logging.getLogger("turnstream")

ServePartition = Callable[[int, Callable[[], bool], asyncio.Event], Coroutine[None, None, None]]
"""`serve(k, owns, stop)`: work for partition k until `stop` is set; before each write,
`owns()` says whether the lease is still valid here (when not, stop: someone may hold it)."""


@dataclass
class _Worker:
    task: asyncio.Task[None]
    stop: asyncio.Event


def member_key(owner: str) -> str:
    """A lease owner's name as one key token (`audit/host-12/ab` → `audit_host-12_ab`)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", owner)


class PartitionOwner:
    """The partitions of `partitions` this instance of `service` holds, and their workers."""

    def __init__(
        self, bus: Bus, service: str, policy: LeasePolicy, owner: str, partitions: int
    ) -> None:
        self.policy = policy
        self.count = partitions
        self.me = member_key(owner)
        ttl = policy.ttl_s
        self.parts = LeaseTable.on(bus, owner, ttl_s=ttl, namespace=f"{service}.part")
        self.members = LeaseTable.on(bus, owner, ttl_s=ttl, namespace=f"{service}.member")
        self.holders: dict[int, str] = {}
        """Partition → holder, as the lease watch last saw it (absent: free)."""
        self.alive: set[str] = set()
        """Member keys with a live membership lease, as the watch last saw them."""
        self.workers: dict[int, _Worker] = {}
        self.changed = asyncio.Event()

    def owns(self, k: int) -> bool:
        """Whether partition k's lease is valid here (no round trip)."""
        return self.parts.holds(str(k))

    @property
    def held(self) -> list[int]:
        return sorted(self.workers)

    async def run(self, serve: ServePartition, stop: asyncio.Event) -> None:
        """Hold partitions and run `serve` for each until `stop`; then stop every worker
        and hand every lease over."""
        leases_stop = asyncio.Event()
        always, ignore = (lambda _k: True), (lambda _k: None)
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(keep_leases(self.members, self.policy, always, ignore, leases_stop))
            tasks.create_task(keep_leases(self.parts, self.policy, always, self._lost, leases_stop))
            tasks.create_task(self.members.watch_expiries(ignore, leases_stop, self._seen_member))
            tasks.create_task(self.parts.watch_expiries(ignore, leases_stop, self._seen_partition))
            try:
                while not stop.is_set():
                    await self._round(tasks, serve)
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(self.policy.renew_s):
                            waits = (self.changed.wait(), stop.wait())
                            await _first(*waits)
                    self.changed.clear()
            finally:
                for k in self.held:
                    await self._stop(k)
                leases_stop.set()  # keep_leases hands every lease over

    async def _round(self, tasks: asyncio.TaskGroup, serve: ServePartition) -> None:
        try:
            for k in self.held:
                if not self.owns(k):
                    log.warning("lost the lease of partition %d; stopping its worker", k)
                    await self._stop(k)
                elif self.workers[k].task.done():  # it stopped on its own: let it be taken again
                    await self._stop(k)
                    await self.parts.release(str(k), hand_over=True)
            if not self.members.holds(self.me):
                await self.members.ensure(self.me)
            plan = rebalance(self.count, self.me, self.alive, *self._view())
            for k in plan.release:
                await self._stop(k)
                await self.parts.release(str(k), hand_over=True)
                log.info("handed partition %d over (%d instances)", k, len(self.alive))
            for k in plan.take:
                if await self.parts.ensure(str(k)) is Ownership.ELSEWHERE:
                    continue
                worker_stop = asyncio.Event()
                owns: Callable[[], bool] = partial(self.owns, k)
                task = tasks.create_task(serve(k, owns, worker_stop))
                self.workers[k] = _Worker(task, worker_stop)
                log.info("holds partition %d (of %d)", k, self.count)
        except LogFull as exc:  # the store full: the alarm said so once; the next round retries
            log.debug("partition round refused (%s); retrying", exc)
        except Exception as exc:  # a disconnect: nats-py reconnects; the next round retries
            log.warning("partition round failed (%s); retrying", exc)

    def _view(self) -> tuple[dict[str, set[int]], list[int]]:
        """Who holds which partitions (our own: those with a worker here), and the free ones."""
        holding: dict[str, set[int]] = {self.me: set(self.workers)}
        for k, owner in self.holders.items():
            if owner != self.parts.owner:
                holding.setdefault(member_key(owner), set()).add(k)
        taken = set().union(*holding.values())
        return holding, [k for k in range(self.count) if k not in taken]

    async def _stop(self, k: int) -> None:
        worker = self.workers.pop(k, None)
        if worker is not None:
            worker.stop.set()
            await worker.task

    def _lost(self, k: str) -> None:
        worker = self.workers.get(int(k))
        if worker is not None:
            worker.stop.set()
        self.changed.set()

    def _seen_member(self, member: str, owner: str | None) -> None:
        if owner is None:
            self.alive.discard(member)
        else:
            self.alive.add(member)
        self.changed.set()

    def _seen_partition(self, k: str, owner: str | None) -> None:
        if not k.isdigit():
            return
        if owner is None:
            self.holders.pop(int(k), None)
        else:
            self.holders[int(k)] = owner
        self.changed.set()


async def _first(*waits: Awaitable[object]) -> None:
    """Until the first of `waits` is done (the others are cancelled)."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
