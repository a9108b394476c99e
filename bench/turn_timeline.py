"""Where a one-tool turn's time goes at K = 1: a timeline of each hop, medians over many turns.

    python bench/turn_timeline.py [--turns 200] [--new-sessions]
        [--json bench/results/turn_timeline.json]

Starts an embedded nats-server and the services as `bench/turns.py` does (scripted provider
with zero delay, one `read_file` call, `auto` approval), runs `--turns` one-tool turns one
after the other on one session (with `--new-sessions`: each of them followed by a turn on a
session of its own, its first, so a first turn's timeline is put beside a later one's,
measured alternately in one run), then reads back what the server stored and puts each
turn's moments on one clock (one machine, so the services' clocks are this one's):
  publish / seen    when this client published the command and saw the turn's TurnEnded
  stored            JetStream's timestamp of each stored message: the inbound command, the
                    gateway's idempotency claim, each log event, the executor's claim and
                    its `done`, the runner's lease writes
  decided           each log event's `time`: when its service stamped it (a runner
                    decision's events share it: the moment it decided, after the delivery)

  seen here       each write to the leases bucket and each JetStream API request (a stream's
                  info, a message got, a direct get, ...) as published, counted per turn
                  while it runs (the turn's round trips beside its appends) and after

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
NEW_SESSION = "timeline-new-{n}"


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
        self.requests: list[tuple[float, str]] = []
        """(seen at, what): each lease write (`lease <op>`) and JetStream API request."""

    async def start(self) -> None:
        await self.bus.nc.subscribe(self.bus.subjects.log_kind_live("TurnEnded"), cb=self.on_msg)
        bucket = self.bus.subjects.invocations_bucket
        await self.bus.nc.subscribe(f"$KV.{bucket}.>", cb=self.on_claim)
        await self.bus.nc.subscribe(f"$KV.{self.bus.subjects.leases_bucket}.>", cb=self.on_lease)
        await self.bus.nc.subscribe("$JS.API.>", cb=self.on_request)

    async def on_lease(self, msg: Any) -> None:
        operation = (msg.headers or {}).get("KV-Operation", "PUT")
        namespace = msg.subject.split(".")[2]  # the runner's `session`, or `approval`
        self.requests.append((time.time(), f"lease {namespace} {operation}"))

    async def on_request(self, msg: Any) -> None:
        # the verb and the stream it asks, without the consumer or subject it names
        tokens = msg.subject.split(".")[2:]
        verb = 3 if tokens[1:2] == ["MSG"] else 2
        what = ".".join(tokens[:verb]) + (f" {tokens[verb]}" if len(tokens) > verb else "")
        self.requests.append((time.time(), what))

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


Sent = list[tuple[str, float, float]]
"""(correlation id, published at, TurnEnded seen at) of each turn."""


async def run(url: str, turns: int, warm: int, new_sessions: bool) -> dict[str, Any]:
    bus = await connect(url, Subjects("ts"), ensure=StreamLimits())
    subjects = bus.subjects
    watcher = Watcher(bus)
    await watcher.start()
    try:
        for n in range(warm):
            await watcher.turn(f"timeline-warm-{n % 5}", f"warm {n}")
        sent: Sent = []
        first: Sent = []
        for n in range(turns):
            sent.append(await watcher.turn(SESSION, f"turn {n}"))
            if new_sessions:  # alternately: the machine's load falls on both alike
                first.append(await watcher.turn(NEW_SESSION.format(n=n), f"turn {n}"))
        await asyncio.sleep(0.5)  # the executor's `done` after the last turn
        gaps = between(sent + first, time.time())  # this client's reads come after
        stored = await Stored.read(bus, subjects)
        result = timeline(stored, sent, watcher, gaps)
        if new_sessions:
            result["first_turns"] = timeline(stored, first, watcher, gaps)
        return result
    finally:
        await bus.close()


class Stored:
    """What the server stored: the log, the inbound commands, the gateway's key claims."""

    def __init__(self, log: list[Any], inbound: list[Any], keys: list[Any]) -> None:
        self.inbound_at = {
            (m.headers or {}).get("Nats-Msg-Id"): (at, m.metadata.sequence.stream)
            for at, m in inbound
        }
        self.key_claim_at = {int(bytes(m.data).decode()): at for at, m in keys if m.data}
        self.by_turn: dict[str, list[tuple[float, Any]]] = defaultdict(list)
        for at, msg in log:
            event = decode(msg.data)
            self.by_turn[event.correlation_id].append((at, event))

    @classmethod
    async def read(cls, bus: Bus, subjects: Subjects) -> Stored:
        log = await read_stream(bus, subjects.log_stream, subjects.log_all)
        inbound = await read_stream(bus, subjects.inbound_stream, subjects.inbound_all)
        claims = f"KV_{subjects.idempotency_bucket}"
        keys = await read_stream(bus, claims, f"$KV.{subjects.idempotency_bucket}.>")
        return cls(log, inbound, keys)


def between(sent: Sent, end: float) -> dict[str, float]:
    """Per turn, when the next one was published (its requests after its end are its own
    until then; the last one's until `end`)."""
    starts = sorted(start for _, start, _ in sent)
    ends = {key: start for key, start, _ in sent}
    following = dict(zip(starts, [*starts[1:], end], strict=True))
    return {key: following[start] for key, start in ends.items()}


def requests_of(
    requests: list[tuple[float, str]], start: float, seen: float, until: float
) -> tuple[dict[str, int], dict[str, int]]:
    """The lease writes and API requests seen while the turn ran, and after it (until the
    next turn's publish)."""
    during: dict[str, int] = defaultdict(int)
    after: dict[str, int] = defaultdict(int)
    for at, what in requests:
        if start <= at <= seen:
            during[what] += 1
        elif seen < at < until:
            after[what] += 1
    return during, after


def timeline(stored: Stored, sent: Sent, watcher: Watcher, next_start: dict[str, float]) -> Any:
    inbound_at, key_claim_at, by_turn = stored.inbound_at, stored.key_claim_at, stored.by_turn
    seen_claims = watcher.claims
    counted: dict[str, dict[str, int]] = {"during": defaultdict(int), "after": defaultdict(int)}

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
        during, after = requests_of(watcher.requests, start, seen, next_start[key])
        for what, n in during.items():
            counted["during"][what] += n
        for what, n in after.items():
            counted["after"][what] += n
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
        "requests_per_turn": {
            when: {what: n / max(1, len(totals)) for what, n in sorted(found.items())}
            for when, found in counted.items()
        },
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
    first = result.get("first_turns")
    turns, p50 = result["turns"], result["p50_ms"]
    line = f"[bold]one-tool turn at K = 1[/]: {turns} turns, p50 {p50:.2f} ms"
    if first is not None:
        ratio = first["p50_ms"] / p50
        line += (
            f" on one session; {first['turns']} turns each on a new session (its first), "
            f"p50 {first['p50_ms']:.2f} ms ({ratio:.2f}×), measured alternately"
        )
    console.print(line)
    columns = ("later turn",) if first is None else ("later turn", "first turn", "Δ")
    compared(
        "moment (median since publish)",
        columns,
        result["points"],
        None if first is None else first["points"],
    )
    compared("hop (median gap)", columns, result["hops"], None if first is None else first["hops"])
    for when in ("during", "after"):
        label = "while the turn runs" if when == "during" else "after it (until the next)"
        later = [(k, v, 0) for k, v in result["requests_per_turn"][when].items()]
        firsts = (
            None
            if first is None
            else [(k, v, 0) for k, v in first["requests_per_turn"][when].items()]
        )
        title = f"lease writes and API requests per turn, {label}"
        compared(title, columns, later, firsts, counted=False)
    last = Table("the last turn's events", "by", "stored ms", "stamped ms", title_justify="left")
    for kind, who, stored, stamped in result["last_turn"]:
        last.add_row(kind, who, f"{stored:.2f}", f"{stamped:.2f}")
    console.print(last)


def compared(
    title: str,
    columns: tuple[str, ...],
    later: list[tuple[str, float, int]],
    first: list[tuple[str, float, int]] | None,
    *,
    counted: bool = True,
) -> None:
    """One table: a later turn's figure per row, and a first turn's beside it (if any);
    `counted`: with the number of turns each median is of."""
    table = Table(title, *columns, *(("n",) if counted else ()))
    of_first = {name: value for name, value, _ in first or []}
    names = [name for name, _, _ in later]
    names += [name for name, _, _ in first or [] if name not in names]
    of_later = {name: (value, n) for name, value, n in later}
    for name in names:
        value, n = of_later.get(name, (0.0, 0))
        cells = [f"{value:.2f}"]
        if first is not None:
            other = of_first.get(name, 0.0)
            cells += [f"{other:.2f}", f"{other - value:+.2f}"]
        table.add_row(name, *cells, *((str(n),) if counted else ()))
    console.print(table)


async def setup(url: str) -> None:
    """The streams and buckets, before the services (they only check that they exist)."""
    bus = await connect(url, Subjects("ts"), ensure=StreamLimits())
    await bus.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--warm", type=int, default=50)
    parser.add_argument(
        "--new-sessions",
        action="store_true",
        help="after each turn on the one session, one on a new session (its first turn)",
    )
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
                result = asyncio.run(run(server.url, args.turns, args.warm, args.new_sessions))
    report(result)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
