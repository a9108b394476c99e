"""audit shell: the request API, and a worker (`worker.py`) for each log partition held.

Any number of instances run. The audit's partitions are the log's
(`TURNSTREAM_LOG_PARTITIONS`, default 1): an instance holds a partition by its lease in the
leases bucket (`audit.part.<k>`, beside one `audit.member.<id>` per live instance), at most
`ceil(partitions / instances)` of them (`core/ownership.py`, `runtime/partitions.py`).
With one partition one instance audits and the others stand by, taking over within the
lease TTL when it dies, at once when it stops. A partition's worker is the audit of that
partition alone: its stream, its durable `audit`, its hash-chained audit file
(`journal.chain_path`: `DATA_DIR/audit.jsonl` with one partition, `DATA_DIR/audit/<k>.jsonl`
with more), the summaries of its sessions, its violations (each once, `report.py`).

The request API (`api.py`) reads the log and asks the turn-runner; it holds no state, so
every instance answers it (a queue group), holder or not.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from turnstream.audit.api import serve_api
from turnstream.audit.checks import CheckConfig
from turnstream.audit.journal import chain_path
from turnstream.audit.worker import PartitionAudit
from turnstream.bus import Bus
from turnstream.bus.streams import StreamsMissing
from turnstream.runtime import now, run_service, service_bus, source_name
from turnstream.runtime.leasing import LeasePolicy
from turnstream.runtime.partitions import PartitionOwner
from turnstream.settings import Settings

log = logging.getLogger("turnstream.audit")
SERVICE = "audit"


class AuditService:
    def __init__(
        self,
        bus: Bus,
        config: CheckConfig,
        data_dir: Path,
        *,
        settings: Settings | None = None,
        clock: Callable[[], datetime] = now,
        tick_s: float = 5.0,
    ) -> None:
        self.bus = bus
        self.config = config
        self.data_dir = data_dir
        self.clock = clock
        self.tick_s = tick_s
        self.source = source_name(SERVICE)
        policy = LeasePolicy.from_settings(settings)
        partitions = bus.subjects.log_partitions
        self.owner = PartitionOwner(bus, SERVICE, policy, policy.owner(self.source), partitions)
        self.workers: dict[int, PartitionAudit] = {}
        """The partitions audited here now (for tests and tools)."""

    async def serve(self, stop: asyncio.Event) -> None:
        api = await serve_api(self.bus)
        log.info("audit %s serving %d partition(s) of the log", self.owner.me, self.owner.count)
        try:
            await self.owner.run(self._serve_partition, stop)
        finally:
            for sub in api:
                await sub.unsubscribe()

    def journal_path(self, k: int) -> Path:
        return chain_path(self.data_dir, self.owner.count, k)

    async def _serve_partition(self, k: int, owns: Callable[[], bool], stop: asyncio.Event) -> None:
        worker = PartitionAudit(
            self.bus,
            k,
            self.config,
            self.journal_path(k),
            source=self.source,
            owns=owns,
            clock=self.clock,
            tick_s=self.tick_s,
        )
        self.workers[k] = worker
        try:
            await worker.serve(stop)
        except (ValueError, StreamsMissing):
            # its audit file is broken, or its durable missing: the service stops, naming
            # it (as at a start)
            raise
        except Exception:
            # e.g. the server away while taking over: the partition is handed over and
            # taken again (here or elsewhere) on a later round
            log.exception("audit of partition %d failed; handing it over", k)
        finally:
            if self.workers.get(k) is worker:
                del self.workers[k]


def check_config(settings: Settings) -> CheckConfig:
    return CheckConfig(
        max_turn_seconds=settings.max_turn_seconds, approval=settings.approval_config()
    )


async def serve(
    settings: Settings,
    stop: asyncio.Event,
    bus: Bus | None = None,
    *,
    clock: Callable[[], datetime] = now,
    tick_s: float = 5.0,
) -> None:
    async with service_bus(settings, SERVICE, bus) as bus:
        service = AuditService(
            bus,
            check_config(settings),
            settings.data_dir,
            settings=settings,
            clock=clock,
            tick_s=tick_s,
        )
        await service.serve(stop)


def main() -> None:
    run_service(SERVICE, serve)
