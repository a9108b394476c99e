"""What one message costs a Python service in nats-py, in CPU, one run.

    python bench/nats_client.py [--messages 20000]

Every event a turn appends is published once (by the service that decides it) and
received by each service that consumes it, so these figures times the events per turn
(`bench/turns.py` prints them) are a floor under each process's CPU per turn:
  publish            a ~500 B event with its `Nats-Msg-Id` header and a reply subject
  publish, no header the same without the header (what building the header costs)
  publish + receive  the same client receiving it back through a subscription callback
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import nats
from rich.console import Console

from turnstream.bus.embedded import EmbeddedServer

console = Console(highlight=False)
PAYLOAD = b'{"x":1}' * 70
HEADERS = {"Nats-Msg-Id": "0192f2b4-3c2a-7cc1-9c1a-6f3e2d1c0b9a"}


async def main(url: str, n: int) -> None:
    nc = await nats.connect(url)
    received, done = 0, asyncio.Event()

    async def on_msg(msg: object) -> None:
        nonlocal received
        received += 1
        if received == n:
            done.set()

    await nc.subscribe("back.>", cb=on_msg)
    await nc.flush()
    figures = {}
    for name, subject, headers in (
        ("publish", "away.s1.Kind", HEADERS),
        ("publish, no header", "away.s1.Kind", None),
        ("publish + receive", "back.s1.Kind", HEADERS),
    ):
        start = time.process_time()
        for _ in range(n):
            await nc.publish(subject, PAYLOAD, reply="_INBOX.x.1.2", headers=headers)
        await nc.flush()
        if subject.startswith("back"):
            await done.wait()
        figures[name] = (time.process_time() - start) / n * 1e6
    for name, micros in figures.items():
        console.print(f"{name:>20}: {micros:5.1f} µs of CPU per message")
    receive = figures["publish + receive"] - figures["publish"]
    console.print(f"{'receive':>20}: {receive:5.1f} µs of CPU per message (the difference)")
    await nc.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, EmbeddedServer(Path(tmp)) as server:
        asyncio.run(main(server.url, args.messages))
