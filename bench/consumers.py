"""How soon a consumer sees an appended event: pull `fetch` loop against push callback.

    python bench/consumers.py [--rounds 500]

One embedded nats-server, one publisher connection, one consumer connection; events are
published one at a time (the K = 1 case, where wake-up cost matters most) and the time
from publish to the consumer's hand-off is measured for both kinds in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import nats
from rich.console import Console

from turnstream.bus.consume import durable_pull, durable_push, fetch_loop
from turnstream.bus.embedded import EmbeddedServer

console = Console(highlight=False)


async def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, EmbeddedServer(Path(tmp)) as server:
        publisher = await nats.connect(server.url)
        consumer = await nats.connect(server.url)
        pjs, cjs = publisher.jetstream(), consumer.jetstream()
        await pjs.add_stream(name="BENCH", subjects=["bench.>"])
        arrivals: asyncio.Queue[float] = asyncio.Queue()
        stop = asyncio.Event()

        async def on_batch(msgs: list[Any]) -> None:
            now = time.perf_counter()
            for msg in msgs:
                await msg.ack()
                arrivals.put_nowait(now)

        async def on_msg(msg: Any) -> None:
            arrivals.put_nowait(time.perf_counter())
            await msg.ack()

        pull = await durable_pull(cjs, "BENCH", "pull", ["bench.pull"])
        loop = asyncio.create_task(fetch_loop(pull, stop, on_batch))
        push = await durable_push(cjs, "BENCH", "push", "deliver.push", ["bench.push"], on_msg)
        figures = {}
        for kind in ("pull", "push", "pull", "push"):
            samples = []
            for _ in range(rounds):
                await asyncio.sleep(0.001)
                start = time.perf_counter()
                await pjs.publish(f"bench.{kind}", b"x" * 1000)
                samples.append((await arrivals.get()) - start)
            figures[kind] = statistics.median(samples) * 1000
        stop.set()
        await loop
        await push.unsubscribe()
        console.print(
            f"publish → consumer hand-off p50: pull fetch {figures['pull']:.3f} ms, "
            f"push callback {figures['push']:.3f} ms "
            f"(push saves {figures['pull'] - figures['push']:.3f} ms per hop)"
        )
        await publisher.close()
        await consumer.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=500)
    asyncio.run(main(parser.parse_args().rounds))
