"""Two audit instances over a log of one stream and of four (needs the partitioned log):
they share the partitions, each session's summary is written by its partition's holder,
each violation is in the log once, one instance stopping hands its partitions over, and
every partition's chain verifies."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import orjson

from tests.integration.partitioned import log_partitions_1_and_4  # noqa: F401 (fixture)
from tests.integration.test_audit import current_summary, until, violations_of
from tests.unit.audit_events import ended, turn
from turnstream.audit import app as audit
from turnstream.audit.chain import verify
from turnstream.audit.journal import chain_path, chains_in
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.core.events import Event
from turnstream.settings import Settings


def settings_in(server: EmbeddedServer, data_dir: Path) -> Settings:
    return Settings(
        nats_url=server.url,
        data_dir=data_dir,
        log_partitions=server.subjects.log_partitions,
        lease_ttl_s=2,
        lease_renew_s=0.5,
    )


@contextlib.asynccontextmanager
async def instance(
    bus: Bus, settings: Settings
) -> AsyncIterator[tuple[audit.AuditService, asyncio.Event]]:
    service = audit.AuditService(
        bus, audit.check_config(settings), settings.data_dir, settings=settings, tick_s=0.2
    )
    stop = asyncio.Event()
    task = asyncio.create_task(service.serve(stop))
    try:
        yield service, stop
    finally:
        stop.set()
        await task


def spread(bus: Bus, prefix: str, per_partition: int) -> list[str]:
    """Session ids, `per_partition` in each partition of the log."""
    subjects, found, i = bus.subjects, [], 0
    while len(found) < per_partition * subjects.log_partitions:
        candidate, i = f"{prefix}-{i}", i + 1
        k = subjects.partition_of(candidate)
        if sum(subjects.partition_of(s) == k for s in found) < per_partition:
            found.append(candidate)
    return found


def bad(session: str) -> list[Event]:
    return [*turn(session, "t1"), ended(session, "t1", "failed")]  # one duplicate_terminal


async def test_two_instances_share_the_partitions_and_hand_them_over(
    bus: Bus, nats_server: EmbeddedServer, tmp_path: Path
) -> None:
    n = bus.subjects.log_partitions
    a_settings = settings_in(nats_server, tmp_path / "a")
    b_settings = settings_in(nats_server, tmp_path / "b")
    before, after = spread(bus, "before", 2), spread(bus, "after", 2)
    async with instance(bus, a_settings) as (a, _):
        await until(lambda: _serving(a, n))
        async with instance(bus, b_settings) as (b, b_stop):
            await until(lambda: _shared(a, b, n))
            for s in before:
                await bus.store.append_facts(bad(s))
            for s in before:
                await until(lambda s=s: _reported(bus, s))
            b_stop.set()
        await until(lambda: _serving(a, n))
        for s in after:
            await bus.store.append_facts(bad(s))
        for s in after:
            await until(lambda s=s: _reported(bus, s))
        await asyncio.sleep(1.0)  # a second copy would be appended by now
        for s in before + after:
            assert [v.data.kind for v in await violations_of(bus, s)] == ["duplicate_terminal"]
        lasts = [
            (await bus.js.stream_info(stream)).state.last_seq for stream in bus.subjects.log_streams
        ]
        await until(lambda: _recorded(a_settings.data_dir, n, lasts))
    for folder in (a_settings.data_dir, b_settings.data_dir):
        for _, path in chains_in(folder):
            assert verify(path.read_bytes().splitlines()).ok, path
    assert len(chains_in(a_settings.data_dir)) == n  # it held them all at the end
    assert len(chains_in(b_settings.data_dir)) == n // 2  # its share (with one: standby)


async def _reported(bus: Bus, session: str) -> bool:
    """The session's violation is in the log and its summary counts it."""
    if not await violations_of(bus, session):
        return False
    return (await current_summary(bus, session)).violations == 1


async def _serving(service: audit.AuditService, n: int) -> bool:
    return len(service.workers) == n


async def _shared(a: audit.AuditService, b: audit.AuditService, n: int) -> bool:
    held = [*a.workers, *b.workers]
    return sorted(held) == list(range(n)) and abs(len(a.workers) - len(b.workers)) <= 1


async def _recorded(folder: Path, n: int, lasts: list[int]) -> bool:
    for k in range(n):
        path = chain_path(folder, n, k)
        lines = path.read_bytes().splitlines() if path.exists() else []
        if not lines or orjson.loads(lines[-1])["seq"] < lasts[k]:
            return False
    return True
