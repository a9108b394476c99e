"""Sub-turns next to the turns they are made of, in one run (DESIGN §11).

    python bench/subturns.py [--turns 40] [--parents 100] [--json bench/results/subturns.json]

Starts an embedded nats-server and the services as separate processes (as `turnstream
up` does), then measures, one session at a time (p50 of `--turns` each):
  text      a text turn: publish → `TurnEnded`
  one-tool  a parent turn with one tool round trip (`read_file`): the turn without a child
  sync      the same parent turn whose tool call is a sync `spawn` of a text sub-turn
and the ratio the issue bounds: sync - one-tool <= text + 2 ms (a sync child costs at most
one text turn more). Then `--parents` sessions at once, each spawning 3 async children:
the time until every result is delivered, and that each was delivered exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import stack
from rich.console import Console
from rich.table import Table
from turns import pct

from turnstream.bus import Bus, connect
from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.streams import StreamLimits
from turnstream.client import message_command, publish_command, send_and_wait
from turnstream.core.events import SubTurnResultDelivered, SubTurnSpawned
from turnstream.core.subjects import Subjects

console = Console(highlight=False)
SCRIPT = """
replies:
  - {text: "ok {input:20}", chunks: whole}
agents:
  child:
    - {text: "child ok {input:20}", chunks: whole}
  toolparent:
    - {tool_calls: [{name: read_file, arguments: {path: bench.txt}}]}
    - {text: "read {last_tool_result:20}", chunks: whole}
  syncparent:
    - {tool_calls: [{name: spawn, arguments: {task: "answer", agent: child}}]}
    - {text: "child said {last_tool_result:20}", chunks: whole}
  asyncparent:
    - tool_calls:
        - {name: spawn, arguments: {task: "a", agent: child, mode: async}}
        - {name: spawn, arguments: {task: "b", agent: child, mode: async}}
        - {name: spawn, arguments: {task: "c", agent: child, mode: async}}
    - {text: "spawned", chunks: whole}
    - {text: "f1", chunks: whole}
    - {text: "f2", chunks: whole}
    - {text: "f3", chunks: whole}
"""
AGENTS = ("child", "toolparent", "syncparent", "asyncparent")


WAIT_S = float(os.environ.get("BENCH_WAIT_S", "300"))


async def _stuck(bus: Bus, parents: int, arrived: set[str]) -> None:
    """Say which parents wait for what (a bench that hangs must say why)."""
    for i in range(parents):
        log = [s.event for s in await bus.store.read_session(f"fan-{i}")]
        spawned = [e for e in log if isinstance(e, SubTurnSpawned)]
        if all(e.data.invocation_id in arrived for e in spawned) and len(spawned) == 3:
            continue
        console.print(f"[red]fan-{i} waits[/]: " + " ".join(e.type for e in log[-12:]))
        for e in spawned:
            child = [c.event.type for c in await bus.store.read_session(e.data.child_session_id)]
            console.print(f"  child {e.data.child_session_id}: {' '.join(child[-8:])}")
        return


async def latencies(bus: Bus, kind: str, agent: str | None, n: int) -> list[float]:
    """Turn latency in ms, one session per turn (scripts count per session)."""
    out = []
    for i in range(n + 3):
        command = message_command(f"b-{kind}-{i}", "go", agent=agent)
        start = time.perf_counter()
        try:
            outcome = await send_and_wait(bus, command, timeout=30)
        except TimeoutError:
            for stored in await bus.store.read_session(command["sessionId"]):
                console.print(stored.event.type, str(stored.event.data)[:120])
            raise RuntimeError(f"{kind} turn {i} ({command['sessionId']}): no TurnEnded") from None
        if not outcome.completed:
            raise RuntimeError(f"{kind} turn {i}: {outcome.status} {outcome.reason}")
        if i >= 3:  # the first turns warm the processes up
            out.append((time.perf_counter() - start) * 1000)
    return out


async def fan_out(bus: Bus, parents: int) -> dict[str, Any]:
    """`parents` sessions at once, each spawning 3 async children: until every result is
    delivered; then, a moment later, the count from the log (what the stream stored: a
    core-NATS subscriber also sees the publishes of batches the log refused)."""
    arrived: set[str] = set()
    all_in = asyncio.Event()

    async def on_delivered(msg: Any) -> None:
        arrived.add(orjson.loads(msg.data)["data"]["invocationId"])
        if len(arrived) >= parents * 3:
            all_in.set()

    sub = await bus.nc.subscribe(
        bus.subjects.log_kind_live("SubTurnResultDelivered"), cb=on_delivered
    )
    since = datetime.now(UTC)
    start = time.perf_counter()
    await asyncio.gather(
        *(
            publish_command(bus, f"fan-{i}", message_command(f"fan-{i}", "go", agent="asyncparent"))
            for i in range(parents)
        )
    )
    try:
        await asyncio.wait_for(all_in.wait(), WAIT_S)
    except TimeoutError:
        await _stuck(bus, parents, arrived)
        raise
    drained = time.perf_counter() - start
    await asyncio.sleep(2.0)
    await sub.unsubscribe()
    spawned = {
        s.event.data.invocation_id
        for s in await bus.store.read_kind(SubTurnSpawned.model_fields["type"].default, since=since)
        if isinstance(s.event, SubTurnSpawned)
    }
    delivered: dict[str, int] = {}
    for stored in await bus.store.read_kind("SubTurnResultDelivered", since=since):
        if isinstance(stored.event, SubTurnResultDelivered):
            key = stored.event.data.invocation_id
            delivered[key] = delivered.get(key, 0) + 1
    return {
        "parents": parents,
        "children": len(spawned),
        "delivered": sum(delivered.values()),
        "duplicates": sum(n - 1 for n in delivered.values() if n > 1),
        "lost": len(spawned - set(delivered)),
        "drain_s": drained,
    }


async def measure(server: EmbeddedServer, turns: int, parents: int) -> dict[str, Any]:
    bus = await connect(server.url, Subjects("ts"), ensure=StreamLimits())
    try:
        text = await latencies(bus, "text", None, turns)
        tool = await latencies(bus, "tool", "toolparent", turns)
        sync = await latencies(bus, "sync", "syncparent", turns)
        fan = await fan_out(bus, parents)
    finally:
        await bus.close()
    p50 = {
        name: statistics.median(v) for name, v in (("text", text), ("tool", tool), ("sync", sync))
    }
    return {
        "p50_ms": p50,
        "p99_ms": {"text": pct(text, 0.99), "tool": pct(tool, 0.99), "sync": pct(sync, 0.99)},
        "sync_extra_ms": p50["sync"] - p50["tool"],
        "sync_extra_over_text": (p50["sync"] - p50["tool"]) / p50["text"],
        "bound_ms": p50["text"] + 2.0,
        "fan_out": fan,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--parents", type=int, default=100)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        stack.workspace(root, "auto")
        agents = root / "agents"
        agents.mkdir()
        for name in AGENTS:
            (agents / f"{name}.md").write_text(f"---\nname: {name}\ndescription: bench\n---\n")
        os.environ["TURNSTREAM_AGENTS"] = str(agents)
        os.environ["TURNSTREAM_MAX_SUBTURNS"] = "5"
        (root / "script.yaml").write_text(SCRIPT)
        with (
            EmbeddedServer(root / "nats") as server,
            stack.running(server, root, root / "script.yaml", console),
        ):
            result = asyncio.run(measure(server, args.turns, args.parents))
    p50, p99, fan = result["p50_ms"], result["p99_ms"], result["fan_out"]
    table = Table(title="sub-turns (one session at a time, p50 / p99 ms)", show_edge=False)
    for column in ("turn", "p50", "p99"):
        table.add_column(column, justify="right" if column != "turn" else "left")
    names = {"text": "text turn", "tool": "parent, one tool call", "sync": "parent, sync sub-turn"}
    for key, name in names.items():
        table.add_row(name, f"{p50[key]:.1f}", f"{p99[key]:.1f}")
    console.print(table)
    ok = result["sync_extra_ms"] <= result["bound_ms"]
    console.print(
        f"a sync sub-turn adds {result['sync_extra_ms']:.1f} ms over the parent without it = "
        f"{result['sync_extra_over_text']:.2f}× a text turn (bound: text + 2 ms = "
        f"{result['bound_ms']:.1f} ms) → {'within' if ok else 'OVER'}"
    )
    clean = fan["duplicates"] == 0 and fan["lost"] == 0 and fan["delivered"] == fan["children"]
    console.print(
        f"{fan['parents']} parents × 3 async children: {fan['children']} spawned, "
        f"{fan['delivered']} delivered in {fan['drain_s']:.2f} s "
        f"({fan['delivered'] / fan['drain_s']:.0f}/s), {fan['duplicates']} duplicate(s), "
        f"{fan['lost']} lost → {'exactly once' if clean else 'NOT exactly once'}"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    sys.exit(0 if clean else 1)


if __name__ == "__main__":
    main()
