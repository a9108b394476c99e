"""What one message costs a Python service in nats-py, in CPU, one run.

    python bench/nats_client.py [--messages 20000] [--rounds 5]

Every event a turn appends is published once (by the service that decides it) and
received by each service that consumes it, so these figures times the events per turn
(`bench/turns.py` prints them) are a floor under each process's CPU per turn:
  publish            a ~500 B event with its `Nats-Msg-Id` header and a reply subject
  publish, no header the same without the header (what building the header costs)
  publish + receive  the same client receiving it back through a subscription callback,
                     with nats-py's own header parse and with ours
                     (`bus/connection.parse_header_lines`), rounds interleaved
and the header parse alone, nats-py's against ours, on header blocks as services get
them (rounds interleaved, best of each). Compare figures within one run: the machine
may be shared.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import timeit
from collections.abc import Callable
from functools import partial
from pathlib import Path

import nats
from nats.aio.client import Client
from rich.console import Console

from turnstream.bus.connection import LIBRARY_HEADER_PARSE, parse_header_lines
from turnstream.bus.embedded import EmbeddedServer

console = Console(highlight=False, soft_wrap=True)
PAYLOAD = b'{"x":1}' * 70
HEADERS = {"Nats-Msg-Id": "0192f2b4-3c2a-7cc1-9c1a-6f3e2d1c0b9a"}
BLOCKS = {
    "Nats-Msg-Id": b"Nats-Msg-Id: 0192f2b4-3c2a-7cc1-9c1a-6f3e2d1c0b9a\r\n\r\n",
    "+ traceparent": (
        b"traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n"
        b"Nats-Msg-Id: 0192f2b4-3c2a-7cc1-9c1a-6f3e2d1c0b9a\r\n\r\n"
    ),
    "+ expected seq": (
        b"Nats-Msg-Id: 0192f2b4-3c2a-7cc1-9c1a-6f3e2d1c0b9a\r\n"
        b"Nats-Expected-Last-Subject-Sequence: 1234\r\n"
        b"Nats-Expected-Last-Subject-Sequence-Subject: ts.log.s-0192f2b4.*\r\n\r\n"
    ),
}
"""Header blocks (after the `NATS/1.0` line) of the events services receive: an append
carries its `Nats-Msg-Id`, with telemetry a `traceparent`, a conditional append the
expected sequence of its session."""


def use_parse(parse: Callable[[bytes], dict[str, str]]) -> None:
    Client._parse_header_lines = staticmethod(parse)  # type: ignore[method-assign]


async def publish_receive(nc: nats.NATS, n: int, received: list[int], done: asyncio.Event) -> float:
    """µs of CPU per message to publish `n` messages and receive them back."""
    received[0] = 0
    done.clear()
    start = time.process_time()
    for _ in range(n):
        await nc.publish("back.s1.Kind", PAYLOAD, reply="_INBOX.x.1.2", headers=HEADERS)
    await nc.flush()
    await done.wait()
    return (time.process_time() - start) / n * 1e6


async def main(url: str, n: int, rounds: int) -> None:
    assert LIBRARY_HEADER_PARSE is not None, "this nats-py's header parse is not the one copied"
    nc = await nats.connect(url)
    received, done = [0], asyncio.Event()

    async def on_msg(msg: object) -> None:
        received[0] += 1
        if received[0] == n:
            done.set()

    await nc.subscribe("back.>", cb=on_msg)
    await nc.flush()
    figures = {}
    for name, headers in (("publish", HEADERS), ("publish, no header", None)):
        start = time.process_time()
        for _ in range(n):
            await nc.publish("away.s1.Kind", PAYLOAD, reply="_INBOX.x.1.2", headers=headers)
        await nc.flush()
        figures[name] = (time.process_time() - start) / n * 1e6
    library_rounds, ours_rounds = [], []
    for _ in range(rounds):
        use_parse(LIBRARY_HEADER_PARSE)
        library_rounds.append(await publish_receive(nc, n, received, done))
        use_parse(parse_header_lines)
        ours_rounds.append(await publish_receive(nc, n, received, done))
    use_parse(LIBRARY_HEADER_PARSE)
    figures["publish + receive (nats-py parse)"] = min(library_rounds)
    figures["publish + receive (our parse)"] = min(ours_rounds)
    for name, micros in figures.items():
        console.print(f"{name:>34}: {micros:5.1f} µs of CPU per message (best of {rounds})")
    for parse in ("nats-py", "our"):
        receive = figures[f"publish + receive ({parse} parse)"] - figures["publish"]
        console.print(f"{f'receive ({parse} parse)':>34}: {receive:5.1f} µs (the difference)")
    await nc.close()


def header_parse(rounds: int, number: int = 50_000) -> None:
    """nats-py's header parse against ours, per block, interleaved rounds, best of each."""
    assert LIBRARY_HEADER_PARSE is not None
    library = LIBRARY_HEADER_PARSE
    console.print(f"header parse alone (ns per message, best of {rounds} rounds of {number:,}):")
    for name, block in BLOCKS.items():
        assert parse_header_lines(block) == library(block)
        best = {"nats-py": float("inf"), "ours": float("inf")}
        for _ in range(rounds):
            for who, parse in (("nats-py", library), ("ours", parse_header_lines)):
                timed = partial(parse, block)
                seconds = timeit.timeit(timed, number=number)
                best[who] = min(best[who], seconds / number * 1e9)
        console.print(
            f"{name:>34}: nats-py {best['nats-py']:6.0f} · ours {best['ours']:6.0f} · "
            f"ours / nats-py = {best['ours'] / best['nats-py']:.2f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    header_parse(args.rounds)
    with tempfile.TemporaryDirectory() as tmp, EmbeddedServer(Path(tmp)) as server:
        asyncio.run(main(server.url, args.messages, args.rounds))
