"""What an in-process context provider adds to a turn, in one run (issue 16: ≤ 0.3 ms per
request).

    python bench/context_providers.py [--turns 300]

Two deployments on one embedded nats-server, each with every service as a task of this
process: `plain` (no context provider) and `ctx` (one in-process provider that answers at
once). Text turns (scripted provider, one model request each) alternate between them, so
machine load falls on both alike. Prints p50/p90 of publish → `TurnEnded`, the ratio and
what the provider adds per request (the p50 difference), and the provider's own share:
`ContextRegistry.gather` plus deciding and folding its answer, timed alone.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for `tests.unit`

import argparse
import asyncio
import logging
import statistics
import tempfile
import time

from turnstream.approval import app as approval
from turnstream.bus import connect
from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.streams import StreamLimits
from turnstream.client import message_command, send_and_wait
from turnstream.context import ContextRegistry, ContextSpec
from turnstream.core.inputs import Tick
from turnstream.core.session import SessionState, fold
from turnstream.core.session.decider import decide_session
from turnstream.core.subjects import Subjects
from turnstream.core.turn import Context, TurnConfig
from turnstream.core.turn.context import ContextGathered, ContextRequest, GatherContext
from turnstream.gateway import app as gateway
from turnstream.settings import Settings
from turnstream.tool_executor import app as tool_executor
from turnstream.turn_runner import app as turn_runner

SCRIPT = 'replies:\n  - {text: "ok {input:20}", chunks: whole}\n'


async def team_rules(_: ContextRequest) -> str:
    return "Team rules: answer in one sentence; cite the file you read."


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1]


async def own_share(n: int) -> float:
    """p50 ms the provider adds to the runner's decisions, without I/O: waiting at
    COMPOSE_REQUEST, gathering, and deciding its answer, against the same request decided
    without a provider."""
    from tests.unit.factories import accepted  # the pure-core test inputs

    registry = ContextRegistry([(ContextSpec("team"), team_rules)])
    plain, with_context = TurnConfig(), TurnConfig(context_providers=True)
    state = fold(SessionState.of("s"), [accepted(1)])
    added = []
    for i in range(n):
        c = Context(now=accepted(1).time, new_id=lambda: f"e{time.perf_counter_ns()}", source="b")
        start = time.perf_counter()
        decide_session(state, Tick(), plain, c)
        middle = time.perf_counter()
        waiting = decide_session(state, Tick(), with_context, c)
        (gather,) = [e for e in waiting.effects if isinstance(e, GatherContext)]
        found = await registry.gather(gather.request)
        decide_session(waiting.state, ContextGathered(gather.turn_id, found), with_context, c)
        end = time.perf_counter()
        if i >= 50:
            added.append(((end - middle) - (middle - start)) * 1000)
    return statistics.median(added)


async def main(turns: int) -> None:
    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "script.yaml").write_text(SCRIPT)
        (root / "workspace").mkdir()
        with EmbeddedServer(root / "nats") as server:
            stop = asyncio.Event()
            buses, settings = {}, {}
            for name in ("plain", "ctx"):
                settings[name] = Settings(
                    nats_url=server.url,
                    data_dir=root / name,
                    prefix=name,
                    script=root / "script.yaml",
                    workspace=root / "workspace",
                    security_mode="auto",
                )
                buses[name] = await connect(server.url, Subjects(name), ensure=StreamLimits())
            context = {
                "plain": ContextRegistry([]),
                "ctx": ContextRegistry([(ContextSpec("team"), team_rules)]),
            }
            times: dict[str, list[float]] = {"plain": [], "ctx": []}
            async with asyncio.TaskGroup() as tasks:
                for name, s in settings.items():
                    tasks.create_task(gateway.serve(s, stop))
                    tasks.create_task(turn_runner.serve(s, stop, context=context[name]))
                    tasks.create_task(approval.serve(s, stop))
                    tasks.create_task(tool_executor.serve(s, stop))
                await asyncio.sleep(1.0)
                for i in range(turns + 30):  # the first 30 warm up
                    for name in ("plain", "ctx") if i % 2 else ("ctx", "plain"):
                        command = message_command(f"{name}-{i % 20}", f"turn {i}")
                        start = time.perf_counter()
                        done = await send_and_wait(buses[name], command, timeout=30)
                        assert done.status == "completed", done
                        if i >= 30:
                            times[name].append((time.perf_counter() - start) * 1000)
                stop.set()
            for bus in buses.values():
                await bus.close()
    base = statistics.median(times["plain"])
    print(f"text turns each: {turns} (one model request per turn)")
    for name, label in (("plain", "no context provider"), ("ctx", "one in-process provider")):
        p50 = statistics.median(times[name])
        print(
            f"{label:26} p50 {p50:7.3f} ms  p90 {pct(times[name], 90):7.3f} ms  "
            f"ratio {p50 / base:5.2f}x  adds {p50 - base:6.3f} ms"
        )
    print(f"{'its own share (no I/O)':26} p50 {await own_share(2000):7.3f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300)
    asyncio.run(main(parser.parse_args().turns))
