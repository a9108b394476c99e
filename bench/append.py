"""Appending one turn step (9 events of ~1 KB) to JetStream, every way we considered.

    python bench/append.py [--rounds 400]

Side by side in one run against one embedded nats-server:
  awaited      each event published and its ack awaited in turn
  publish_async  nats-py's pipelined publish, then gather the acks
  appender     ours: pipelined, one wildcard reply subscription for all acks
  conditional  what the decider does: first event conditional and awaited, rest pipelined
  atomic       an ADR-50 atomic batch (allow_atomic), condition on its first message
  fast         an ADR-50 fast-ingest batch (allow_batched, nats-server 2.14), condition on
               its first message: stored as it arrives, a flow ack for the first message
               and a pub ack for the commit
  decision     the same through `PipelinedAppender.publish_batch`: what the turn-runner
               does now (`conditional` is what it did before)
and the events/s of many steps in flight at once (stock vs ours).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import uuid_utils
from rich.console import Console
from rich.table import Table

from turnstream.bus import connect
from turnstream.bus.appender import PipelinedAppender
from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.streams import StreamLimits
from turnstream.core.subjects import Subjects

STEP = 9
PAYLOAD = orjson.dumps({"pad": "x" * 1000})
console = Console(highlight=False)


async def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, EmbeddedServer(Path(tmp)) as server:
        bus = await connect(server.url, Subjects("ts"), ensure=StreamLimits())
        js, nc = bus.js, bus.nc
        config = (await js.stream_info(bus.subjects.log_stream)).config
        config.allow_atomic = True
        config.allow_batched = True
        await js.update_stream(config=config)
        appender = PipelinedAppender(nc)
        last = {"seq": 0}

        def items(session: str) -> list[tuple[str, bytes, dict[str, str]]]:
            return [
                (f"ts.log.{session}.E{i}", PAYLOAD, {"Nats-Msg-Id": str(uuid_utils.uuid7())})
                for i in range(STEP)
            ]

        async def awaited() -> None:
            for subject, payload, headers in items("a"):
                await js.publish(subject, payload, headers=headers)

        async def stock(session: str = "b") -> None:
            futures = [await js.publish_async(s, p, headers=h) for s, p, h in items(session)]
            await asyncio.gather(*futures)

        async def ours(session: str = "c") -> None:
            await appender.publish(items(session), 10)

        async def conditional() -> None:
            steps = items("d")
            first = steps[0]
            headers = {
                **first[2],
                "Nats-Expected-Last-Subject-Sequence": str(last["seq"]),
                "Nats-Expected-Last-Subject-Sequence-Subject": "ts.log.d.>",
            }
            await appender.publish([(first[0], first[1], headers)], 10)
            seqs = await appender.publish(steps[1:], 10)
            last["seq"] = seqs[-1]

        async def atomic() -> None:
            batch_id = str(uuid_utils.uuid7())
            steps = items("e")
            for index, (subject, payload, headers) in enumerate(steps, 1):
                headers = {**headers, "Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(index)}
                if index == 1:
                    headers["Nats-Expected-Last-Subject-Sequence"] = str(last.get("e", 0))
                    headers["Nats-Expected-Last-Subject-Sequence-Subject"] = "ts.log.e.>"
                if index < len(steps):
                    await nc.publish(subject, payload, headers=headers)
                else:
                    headers["Nats-Batch-Commit"] = "1"
                    reply = await nc.request(subject, payload, headers=headers, timeout=10)
                    last["e"] = orjson.loads(reply.data)["seq"]

        fast_inbox, fast_replies = nc.new_inbox(), {}
        batches = iter(range(1, 10**9))

        async def on_fast_reply(msg: Any) -> None:  # <inbox>.<batch>.<flow>.fail.<seq>.<op>.$FI
            fast_replies[msg.subject[len(fast_inbox) + 1 :].split(".")[0]].put_nowait(msg.data)

        await nc.subscribe(fast_inbox + ".>", cb=on_fast_reply)

        async def fast() -> None:
            key = str(next(batches))
            replies = fast_replies[key] = asyncio.Queue()
            steps = items("f")
            for index, (subject, payload, headers) in enumerate(steps, 1):
                op = 0 if index == 1 else 2 if index == len(steps) else 1
                if index == 1:
                    headers = {
                        **headers,
                        "Nats-Expected-Last-Subject-Sequence": str(last.get("f", 0)),
                        "Nats-Expected-Last-Subject-Sequence-Subject": "ts.log.f.>",
                    }
                reply = f"{fast_inbox}.{key}.1000.fail.{index}.{op}.$FI"
                await nc.publish(subject, payload, reply=reply, headers=headers)
            while b'"stream"' not in (ack := await replies.get()):  # the flow ack, then this
                pass
            last["f"] = orjson.loads(ack)["seq"]
            del fast_replies[key]

        async def decision() -> None:  # what the turn-runner does: the store's fast batch
            steps = items("g")
            first = steps[0]
            headers = {
                **first[2],
                "Nats-Expected-Last-Subject-Sequence": str(last.get("g", 0)),
                "Nats-Expected-Last-Subject-Sequence-Subject": "ts.log.g.>",
            }
            batch = [(first[0], first[1], headers), *steps[1:]]
            last["g"] = await appender.publish_batch(batch, 10)

        async def timed(fn: Callable[[], Awaitable[None]]) -> float:
            samples = []
            for _ in range(rounds):
                start = time.perf_counter()
                await fn()
                samples.append(time.perf_counter() - start)
            return statistics.median(samples) * 1000

        table = Table("way", f"{STEP} events p50 ms", "vs appender")
        ways = {
            "awaited": awaited,
            "publish_async": stock,
            "appender": ours,
            "conditional": conditional,
            "atomic": atomic,
            "fast": fast,
            "decision": decision,
        }
        for fn in ways.values():  # warm up every path
            await fn()
        figures = {name: await timed(fn) for name, fn in ways.items()}
        for name, value in figures.items():
            table.add_row(name, f"{value:.3f}", f"{value / figures['appender']:.2f}×")
        console.print(table)

        for name, fn in (("publish_async", stock), ("appender", ours)):
            start = time.perf_counter()
            await asyncio.gather(*(fn(f"t{i % 50}") for i in range(rounds)))
            rate = rounds * STEP / (time.perf_counter() - start)
            console.print(f"{name:>14}: {rate:,.0f} events/s with {rounds} steps in flight")
        await bus.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=400)
    asyncio.run(main(parser.parse_args().rounds))
