"""Where a one-tool turn's time goes at K = 1: a timeline of each hop, medians over many turns.

    python bench/turn_timeline.py [--turns 200] [--json bench/results/turn_timeline.json]

Starts an embedded nats-server and the services as `bench/turns.py` does (scripted provider
with zero delay, one `read_file` call, `auto` approval), runs `--turns` one-tool turns one
after the other on one session, then reads back what the server stored and puts each
turn's moments on one clock (one machine, so the services' clocks are this one's):
  publish / seen    when this client published the command and saw the turn's TurnEnded
  stored            JetStream's timestamp of each stored message: the inbound command, the
                    gateway's idempotency claim, each log event, the executor's claim and
                    its `done`, the runner's lease writes
  decided           each log event's `time`: when its service stamped it (a runner
                    decision's events share it: the moment it decided, after the delivery)

and prints, per event of the turn in order, the median time since the publish, and per
named hop the median gap (the gaps' medians need not add up to the total's median).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import stack
from rich.console import Console
from rich.table import Table

from turnstream.bus import Bus, connect
from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.streams import StreamLimits
from turnstream.client import message_command
from turnstream.core.events import decode
from turnstream.core.subjects import Subjects

console = Console(highlight=False)
SCRIPT = (
    "replies:\n"
    "  - {tool_calls: [{name: read_file, arguments: {path: bench.txt}}]}\n"
    '  - {text: "read {last_tool_result:20}", chunks: whole}\n'
)
SESSION = "timeline-0"


def ts(moment: datetime) -> float:
    return moment.timestamp()


async def read_stream(bus: Bus, stream: str, subject: str) -> list[tuple[float, Any]]:
    """Every message of `stream` on `subject`: (stored at, message), in order."""
    out: list[tuple[float, Any]] = []
    info = await bus.js.stream_info(stream)
    if info.state.messages == 0:
        return out
    done = asyncio.get_running_loop().create_future()

    async def on_msg(msg: Any) -> None:
        out.append((ts(msg.metadata.timestamp), msg))
        if msg.metadata.num_pending == 0 and not done.done():
            done.set_result(None)

    sub = await bus.js.subscribe(
        subject,
        stream=stream,
        cb=on_msg,
        ordered_consumer=True,
        pending_msgs_limit=1_000_000,
        pending_bytes_limit=1024 * 1024 * 1024,
    )
    try:
        await asyncio.wait_for(done, 30)
    except TimeoutError:
        pass  # nothing on the subject
    finally:
        await sub.unsubscribe()
    return out


class Watcher:
    """When each correlation id's TurnEnded arrived here (wall clock), and each write of
    the executor's claims as it was published (the bucket keeps only a key's last value)."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.waiters: dict[str, asyncio.Future[float]] = {}
        self.claims: dict[tuple[str, bytes], float] = {}

    async def start(self) -> None:
        await self.bus.nc.subscribe(self.bus.subjects.log_kind_live("TurnEnded"), cb=self.on_msg)
        bucket = self.bus.subjects.invocations_bucket
        await self.bus.nc.subscribe(f"$KV.{bucket}.>", cb=self.on_claim)

    async def on_claim(self, msg: Any) -> None:
        self.claims.setdefault((msg.subject.rsplit(".", 1)[1], bytes(msg.data)), time.time())

    async def on_msg(self, msg: Any) -> None:
        at = time.time()
        waiter = self.waiters.pop(orjson.loads(msg.data)["correlationId"], None)
        if waiter is not None and not waiter.done():
            waiter.set_result(at)

    async def turn(self, session: str, text: str) -> tuple[str, float, float]:
        command = message_command(session, text)
        key = command["idempotencyKey"]
        waiter = asyncio.get_running_loop().create_future()
        self.waiters[key] = waiter
        payload = orjson.dumps(command)
        start = time.time()
        await self.bus.js.publish(
            self.bus.subjects.inbound(session), payload, headers={"Nats-Msg-Id": key}
        )
        return key, start, await asyncio.wait_for(waiter, 30)


async def run(url: str, turns: int, warm: int) -> dict[str, Any]:
    bus = await connect(url, Subjects("ts"), ensure=StreamLimits())
    subjects = bus.subjects
    watcher = Watcher(bus)
    await watcher.start()
    try:
        for n in range(warm):
            await watcher.turn(f"timeline-warm-{n % 5}", f"warm {n}")
        sent: list[tuple[str, float, float]] = []
        for n in range(turns):
            sent.append(await watcher.turn(SESSION, f"turn {n}"))
        await asyncio.sleep(0.5)  # the executor's `done` after the last turn
        return await timeline(bus, subjects, sent, watcher.claims)
    finally:
        await bus.close()


async def timeline(
    bus: Bus,
    subjects: Subjects,
    sent: list[tuple[str, float, float]],
    seen_claims: dict[tuple[str, bytes], float],
) -> Any:
    log = await read_stream(bus, subjects.log_stream, subjects.log_session(SESSION))
    inbound = await read_stream(bus, subjects.inbound_stream, subjects.inbound(SESSION))
    keys = await read_stream(
        bus, f"KV_{subjects.idempotency_bucket}", f"$KV.{subjects.idempotency_bucket}.>"
    )
    leases = await read_stream(
        bus, f"KV_{subjects.leases_bucket}", f"$KV.{subjects.leases_bucket}.>"
    )
    inbound_at = {
        (m.headers or {}).get("Nats-Msg-Id"): (at, m.metadata.sequence.stream) for at, m in inbound
    }
    key_claim_at = {int(bytes(m.data).decode()): at for at, m in keys if m.data}
    lease_writes = sorted(at for at, _ in leases)

    by_turn: dict[str, list[tuple[float, Any]]] = defaultdict(list)
    for at, msg in log:
        event = decode(msg.data)
        by_turn[event.correlation_id].append((at, event))

    rows: dict[str, list[float]] = defaultdict(list)
    order: list[str] = []
    gaps: dict[str, list[float]] = defaultdict(list)
    totals: list[float] = []

    def point(name: str, value: float, start: float) -> None:
        if name not in rows:
            order.append(name)
        rows[name].append((value - start) * 1000)

    for key, start, seen in sent:
        events = by_turn.get(key, [])
        if not events or key not in inbound_at:
            continue
        totals.append((seen - start) * 1000)
        in_at, in_seq = inbound_at[key]
        marks: dict[str, float] = {"publish": start, "inbound stored": in_at}
        point("inbound stored", in_at, start)
        if in_seq in key_claim_at:
            marks["key claim stored"] = key_claim_at[in_seq]
            point("gateway: key claim stored", key_claim_at[in_seq], start)
        count: dict[str, int] = defaultdict(int)
        previous_time = None
        for at, event in events:
            count[event.type] += 1
            name = event.type + (f"#{count[event.type]}" if count[event.type] > 1 else "")
            who = event.source.split(":")[0].split("@")[0]
            decided = ts(event.time)
            if decided != previous_time:
                point(f"{who}: stamped {name}…", decided, start)
            marks[f"decided {name}"] = decided
            previous_time = decided
            point(f"  stored {name}", at, start)
            marks[f"stored {name}"] = at
            if event.type == "ToolInvocationRequested":
                inv = event.data.invocation_id
                for value, label in ((b"running", "claim"), (b"done", "claim done")):
                    if (inv, value) in seen_claims:
                        marks[f"executor {label} seen"] = seen_claims[inv, value]
        for name in ("executor claim seen", "executor claim done seen"):
            if name in marks:
                point(f"tool-executor: {name[9:]}", marks[name], start)
        within = [w for w in lease_writes if start <= w <= seen]
        if within:
            marks["lease write stored"] = within[0]
        point("client: saw TurnEnded", seen, start)
        marks["seen"] = seen
        for label, a, b in HOPS:
            if a in marks and b in marks:
                gaps[label].append((marks[b] - marks[a]) * 1000)
    last = by_turn[sent[-1][0]]
    one = [
        (
            e.type,
            e.source.split("/")[0],
            (at - sent[-1][1]) * 1000,
            (ts(e.time) - sent[-1][1]) * 1000,
        )
        for at, e in last
    ]
    return {
        "last_turn": one,
        "turns": len(totals),
        "p50_ms": statistics.median(totals),
        "points": [(name, statistics.median(rows[name]), len(rows[name])) for name in order],
        "hops": [
            (label, statistics.median(gaps[label]), len(gaps[label]))
            for label, _, _ in HOPS
            if gaps[label]
        ],
        "lease_writes_per_turn": len(lease_writes) / max(1, len(sent)),
    }


HOPS = [
    ("client → inbound stored", "publish", "inbound stored"),
    ("gateway: delivered, decided → key claim stored", "inbound stored", "key claim stored"),
    (
        "gateway: key claim stored → InputAccepted stored",
        "key claim stored",
        "stored InputAccepted",
    ),
    ("runner: InputAccepted stored → deciding", "stored InputAccepted", "decided SessionTurnStart"),
    (
        "runner: decision 1 (turn start) → stored",
        "decided SessionTurnStart",
        "stored ProviderRequestStarted",
    ),
    (
        "runner: its ack, the model call → deciding the tool call",
        "stored ProviderRequestStarted",
        "decided ToolInvocationRequested",
    ),
    (
        "runner: decision 2 (the tool call) → Requested stored",
        "decided ToolInvocationRequested",
        "stored ToolInvocationRequested",
    ),
    (
        "executor: Requested stored → claim seen",
        "stored ToolInvocationRequested",
        "executor claim seen",
    ),
    (
        "executor: claim seen → Started stamped",
        "executor claim seen",
        "decided ToolInvocationStarted",
    ),
    (
        "executor: Started stamped → result stamped (the tool)",
        "decided ToolInvocationStarted",
        "decided ToolInvocationSucceeded",
    ),
    (
        "executor: result stamped → stored",
        "decided ToolInvocationSucceeded",
        "stored ToolInvocationSucceeded",
    ),
    (
        "runner: Succeeded stored → deciding",
        "stored ToolInvocationSucceeded",
        "decided StagePreFired#6",
    ),
    (
        "runner: decision 3 (compose again) → stored",
        "decided StagePreFired#6",
        "stored ProviderRequestStarted#2",
    ),
    (
        "runner: its ack, the model call → deciding the reply",
        "stored ProviderRequestStarted#2",
        "decided TurnEnded",
    ),
    ("runner: decision 4 (the reply, TurnEnded) → stored", "decided TurnEnded", "stored TurnEnded"),
    ("client: TurnEnded stored → seen", "stored TurnEnded", "seen"),
    (
        "(off the path) executor: Succeeded stored → claim done seen",
        "stored ToolInvocationSucceeded",
        "executor claim done seen",
    ),
    ("total", "publish", "seen"),
]
"""(label, from mark, to mark): the marks are named in `timeline` (`decided X`, `stored X`)."""


def report(result: dict[str, Any]) -> None:
    console.print(
        f"[bold]one-tool turn at K = 1[/]: {result['turns']} turns, p50 {result['p50_ms']:.2f} ms;"
        f" lease writes per turn {result['lease_writes_per_turn']:.2f}"
    )
    table = Table("moment (median since publish)", "ms", "n")
    for name, value, n in result["points"]:
        table.add_row(name, f"{value:.2f}", str(n))
    console.print(table)
    hops = Table("hop (median gap)", "ms", "n")
    for label, value, n in result["hops"]:
        hops.add_row(label, f"{value:.2f}", str(n))
    console.print(hops)
    last = Table("the last turn's events", "by", "stored ms", "stamped ms", title_justify="left")
    for kind, who, stored, stamped in result["last_turn"]:
        last.add_row(kind, who, f"{stored:.2f}", f"{stamped:.2f}")
    console.print(last)


async def setup(url: str) -> None:
    """The streams and buckets, before the services (they only check that they exist)."""
    bus = await connect(url, Subjects("ts"), ensure=StreamLimits())
    await bus.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--warm", type=int, default=50)
    parser.add_argument("--keep", action="store_true", help="keep the services' logs")
    parser.add_argument("--json", type=Path, default=Path("bench/results/turn_timeline.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tempfile.mkdtemp()) if args.keep else Path(tmp)
        if args.keep:
            console.print(f"services' logs in {root}")
        stack.workspace(root, "auto")
        (root / "one-tool.yaml").write_text(SCRIPT)
        with EmbeddedServer(root / "nats") as server:
            asyncio.run(setup(server.url))
            with stack.running(server, root, root / "one-tool.yaml", console):
                result = asyncio.run(run(server.url, args.turns, args.warm))
    report(result)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
