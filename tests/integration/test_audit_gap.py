"""The audit file keeps every event even when deliveries are lost on a reconnect:
the server counts them delivered and, with AckPolicy.ALL, the ack of a later message covers
them; the audit sees the jump in stream sequence and reads the gap from the log."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
from nats.js import api

from tests.unit.audit_events import ended, start
from turnstream.audit import worker
from turnstream.audit.chain import verify
from turnstream.audit.checks import CheckConfig
from turnstream.bus import Bus, connect
from turnstream.bus.embedded import EmbeddedServer
from turnstream.core.subjects import Subjects


class Proxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.blackhole = False
        self.writers: list[asyncio.StreamWriter] = []

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _conn(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        ur, uw = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        self.writers += [cw, uw]

        async def pump(r: asyncio.StreamReader, w: asyncio.StreamWriter, down: bool) -> None:
            try:
                while data := await r.read(65536):
                    if down and self.blackhole:
                        continue  # bytes the server sent that never reach the client
                    w.write(data)
                    await w.drain()
            except Exception:
                pass
            finally:
                w.close()

        await asyncio.gather(pump(cr, uw, False), pump(ur, cw, True))

    def cut(self) -> None:
        for w in self.writers:
            w.close()
        self.writers.clear()

    async def close(self) -> None:
        self.cut()
        self.server.close()
        await self.server.wait_closed()
        await asyncio.sleep(0.1)  # the pumps see their sockets closed and end


async def publish(bus: Bus, prefix: str, n: int) -> None:
    events = []
    for i in range(n):
        events += [start(f"{prefix}{i}", f"t-{prefix}{i}"), ended(f"{prefix}{i}", f"t-{prefix}{i}")]
    await bus.store.append_facts(events)


async def test_deliveries_lost_on_a_reconnect_are_read_from_the_log(
    bus: Bus, nats_server: EmbeddedServer, tmp_path: Path
) -> None:
    port = int(nats_server.url.rsplit(":", 1)[1])
    proxy = Proxy(port)
    pport = await proxy.start()
    abus = await connect(f"nats://127.0.0.1:{pport}", Subjects("ts"))
    path = tmp_path / "audit.jsonl"
    service = worker.PartitionAudit(abus, 0, CheckConfig(), path, tick_s=60)
    stop = asyncio.Event()
    task = asyncio.create_task(service.serve(stop))
    await publish(bus, "warm", 10)
    await asyncio.sleep(1.0)
    proxy.blackhole = True
    await publish(bus, "lost", 10)
    await asyncio.sleep(0.3)
    proxy.cut()
    proxy.blackhole = False
    await asyncio.sleep(2.0)  # nats-py reconnects through the proxy
    await publish(bus, "after", 10)
    last = await bus.store.last_seq("after9")

    async def caught_up() -> None:
        while service.journal.last_seq < last:  # noqa: ASYNC110 (polling another task's state)
            await asyncio.sleep(0.1)

    await asyncio.wait_for(caught_up(), 20)

    async def acked() -> api.ConsumerInfo:  # the audit acks a batch after its KV writes
        while True:
            info = await bus.js.consumer_info(bus.subjects.log_stream, worker.DURABLE)
            if info.num_ack_pending == 0:
                return info
            await asyncio.sleep(0.1)

    info = await asyncio.wait_for(acked(), 20)
    stop.set()
    await task
    await abus.close()
    await proxy.close()
    seqs = [orjson.loads(line)["seq"] for line in path.read_bytes().splitlines()]
    assert sorted(set(range(1, last + 1)) - set(seqs)) == []
    assert seqs == sorted(seqs)
    assert verify(path.read_bytes().splitlines(keepends=True)).ok
    assert info.num_ack_pending == 0
    assert len([s for s in service.auditor.summaries if s.startswith("lost")]) == 10
