"""What the runtime adds to a streamed model turn, against a local wire-format server.

    python bench/provider.py [--turns 200]

For each real adapter (anthropic, openai: the official SDKs), a local server speaks the
provider's streaming wire format (tests/providers/fake_servers.py) and every service runs
as its own process. Measured per turn, p50 and p99, in the same run for both:
  first byte → first token   the server starts its stream → the first delta on ts.live
  last byte → TurnEnded      the server ends its stream → `TurnEnded` observed by a client
and, as the baseline, the same SDK streaming the same answer with nothing around it
(first byte → its first text event; last byte → the stream is done). The runtime's
overhead is the difference.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parents[1]))
from tests.providers.fake_servers import FakeAnthropic, FakeOpenAI, FakeServer, Text
from turnstream.bus import connect
from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.streams import StreamLimits
from turnstream.cli.up import Supervisor
from turnstream.client import message_command
from turnstream.core.subjects import Subjects
from turnstream.settings import Settings

console = Console(highlight=False)
ANSWER = Text("a streamed answer of twenty words " * 4, chunks=20)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def measure(url: str, fake: FakeServer, turns: int) -> dict[str, float]:
    bus = await connect(url, Subjects("ts"), ensure=StreamLimits())
    first_token: dict[str, float] = {}
    ended: dict[str, float] = {}
    done: dict[str, asyncio.Event] = {}

    async def on_live(msg: Any) -> None:
        session = msg.subject.split(".")[2]
        first_token.setdefault(session, time.perf_counter())

    async def on_end(msg: Any) -> None:
        session = msg.subject.split(".")[2]
        ended[session] = time.perf_counter()
        done[session].set()

    await bus.nc.subscribe("ts.live.>", cb=on_live)
    await bus.nc.subscribe(bus.subjects.log_kind_live("TurnEnded"), cb=on_end)
    to_token, to_end = [], []
    for i in range(turns):
        session = f"bench-{type(fake).__name__}-{i}"
        done[session] = asyncio.Event()
        command = message_command(session, "go")
        await bus.js.publish(
            bus.subjects.inbound(session),
            orjson.dumps(command),
            headers={"Nats-Msg-Id": command["idempotencyKey"]},
        )
        await asyncio.wait_for(done[session].wait(), 30)
        first_byte, last_byte = fake.streamed[-1]
        to_token.append(first_token[session] - first_byte)
        to_end.append(ended[session] - last_byte)
    await bus.close()
    return {
        "first_byte_to_first_token_p50_ms": pct(to_token, 0.5),
        "first_byte_to_first_token_p99_ms": pct(to_token, 0.99),
        "last_byte_to_turn_ended_p50_ms": pct(to_end, 0.5),
        "last_byte_to_turn_ended_p99_ms": pct(to_end, 0.99),
        "stream_ms_p50": statistics.median(b - a for a, b in fake.streamed) * 1000,
    }


async def run_provider(kind: str, url: str, root: Path, turns: int) -> dict[str, float]:
    fake: FakeServer = (
        FakeAnthropic([ANSWER] * (turns + 1))
        if kind == "anthropic"
        else (FakeOpenAI([ANSWER] * (turns + 1)))
    )
    async with fake:
        os.environ["TURNSTREAM_BASE_URL"] = fake.base_url + ("" if kind == "anthropic" else "/v1")
        os.environ["TURNSTREAM_MODEL"] = f"{'claude' if kind == 'anthropic' else 'gpt'}-fake-1"
        os.environ[f"{kind.upper()}_API_KEY"] = "bench-key"
        settings = Settings(data_dir=root, provider=kind)  # type: ignore[arg-type]
        supervisor = Supervisor(url, settings, console)
        supervisor.start_all()
        try:
            await asyncio.sleep(1.5)
            return await measure(url, fake, turns)
        finally:
            supervisor.stop_all()


async def sdk_alone(kind: str, turns: int) -> dict[str, float]:
    """The baseline: the SDK streaming the same answer in this process, nothing else."""
    import anthropic
    import openai

    to_text, to_done = [], []
    async with (FakeAnthropic if kind == "anthropic" else FakeOpenAI)([ANSWER] * turns) as fake:
        if kind == "anthropic":
            client: Any = anthropic.AsyncAnthropic(
                api_key="k", base_url=fake.base_url, max_retries=0
            )
        else:
            client = openai.AsyncOpenAI(api_key="k", base_url=fake.base_url + "/v1", max_retries=0)
        for _ in range(turns):
            first_text = None
            if kind == "anthropic":
                async with client.messages.stream(
                    model="claude-fake-1",
                    max_tokens=64,
                    messages=[{"role": "user", "content": "go"}],
                ) as stream:
                    async for event in stream:
                        if event.type == "text" and first_text is None:
                            first_text = time.perf_counter()
                    await stream.get_final_message()
            else:
                chunks = await client.chat.completions.create(
                    model="gpt-fake-1", messages=[{"role": "user", "content": "go"}], stream=True
                )
                async for chunk in chunks:
                    if chunk.choices and chunk.choices[0].delta.content and first_text is None:
                        first_text = time.perf_counter()
            done = time.perf_counter()
            first_byte, last_byte = fake.streamed[-1]
            assert first_text is not None
            to_text.append(first_text - first_byte)
            to_done.append(done - last_byte)
        await client.close()
    return {"first_text_p50_ms": pct(to_text, 0.5), "done_p50_ms": pct(to_done, 0.5)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp, EmbeddedServer(Path(tmp) / "nats") as server:
        for kind in ("anthropic", "openai"):
            results[kind] = asyncio.run(run_provider(kind, server.url, Path(tmp), args.turns))
            results[kind].update(asyncio.run(sdk_alone(kind, args.turns)))
    table = Table(
        "provider",
        "first byte → first token p50/p99 ms",
        "SDK alone: → first text p50",
        "last byte → TurnEnded p50/p99 ms",
        "SDK alone: → done p50",
    )
    for kind, r in results.items():
        token = "first_byte_to_first_token"
        end = "last_byte_to_turn_ended"
        table.add_row(
            kind,
            f"{r[f'{token}_p50_ms']:.2f} / {r[f'{token}_p99_ms']:.2f}",
            f"{r['first_text_p50_ms']:.2f}",
            f"{r[f'{end}_p50_ms']:.2f} / {r[f'{end}_p99_ms']:.2f}",
            f"{r['done_p50_ms']:.2f}",
        )
    console.print(table)


if __name__ == "__main__":
    main()
