"""`bench/scale.py` part 2: 1, 2 and 3 instances of every service on the 3-node cluster.

Run once per count of log partitions asked for (`--log-partitions 1,4`: one cluster each,
one after the other, printed side by side): the cluster gets the subject mapping and the
derived accounts file for N partitions, every service TURNSTREAM_LOG_PARTITIONS=N, and
every read of the log names its partition's stream (`TS_LOG`, or `TS_LOG_0..N-1`).

The fleet is `tests/cluster/fleet.py`'s (each service instance a real process as its own
user of `ops/accounts.conf`, on the shipped R3 cluster config), the load
`tests/cluster/load.py`'s (one client per session: a message, its TurnEnded, the next;
the scripted one-tool turn: `count_run`, approved by the allowlist in the turn-runner, then
a text reply). One run, one cluster, the load never stops:
  n = 1, 2, 3   every one of gateway, turn-runner, approval and tool-executor grown to n
                instances (the audit stays one), a warm-up, then `seconds` measured:
                turns/s, p50 turn latency, CPU ms per turn of each service (all its
                instances: `/proc`) and per instance (÷ n), the three nats-server nodes,
                the bench's own process, the total
                and how often a session moved to another runner, and each service's
                consumer deliveries per turn (redeliveries included: a fact naked by a
                non-holder of the session's lease comes again)
                (over every partition's durable)
  handover      down to 2 turn-runners; the one holding the most sessions is killed with
                SIGKILL (held: a `session.<key>` lease each, or, for a runner that owns
                partitions, a `turn-runner.part.<k>` lease: that partition's sessions):
                the time from the kill to each of its sessions' next event appended by a
                turn-runner (max, p50); then again, the killed runner started at once
                under the same TURNSTREAM_RUNNER_ID (it takes its leases back)
  leader kill   the leader's node of the busiest partition's stream (the most sessions;
                `TS_LOG` itself at N = 1) killed with SIGKILL mid-load: the longest gap
                between consecutive stored appends of that stream (server timestamps)
                after the kill, against the longest in as many appends before it; the
                node is restarted
  correctness   the whole log read back: every accepted command's turn ended exactly
                once, each side effect at most once, no audit violation, replay equals the
                live state (`tests/cluster/load.py:verify`)
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import subprocess
import time
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
from nats.js import api
from rich.console import Console
from rich.table import Table
from turns import cpu_seconds

from tests.cluster.conftest import Cluster, start_cluster
from tests.cluster.fleet import SERVICES, USER, Fleet
from tests.cluster.load import Load, audit_caught_up, verify, wait_quiet
from turnstream.bus import Bus, connect
from turnstream.bus.ordered import ordered_subscribe
from turnstream.bus.scan import log_last_seq
from turnstream.bus.streams import StreamLimits
from turnstream.core.subjects import Subjects, session_key

PREFIX = "ts"
RUNNER_SERVICE = "turn-runner"
"""The service name in a runner's partition leases (`<service>.part.<k>`,
`runtime/partitions.py`)."""
SCRIPT = """
replies:
  - tool_calls: [{name: count_run, arguments: {file: runs.txt}}]
  - text: "done after {last_tool_result:20}"
"""
ENV = {
    "TURNSTREAM_SECURITY_MODE": "allowlist",
    "TURNSTREAM_ALLOWLIST": '[{"tool": "count_run", "args": {"file": "runs.txt"}}]',
}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def grow(fleet: Fleet, n: int) -> None:
    """Every scaling service up to `n` live instances, each serving."""
    started = [
        fleet.start(service) for service in SERVICES for _ in range(n - len(fleet.alive(service)))
    ]
    for name in started:
        await fleet.ready(name)


CONSUMERS = {
    "gateway": "gateway",
    "turn_runner": "turn-runner",
    "approval": "approval",
    "tool_executor": "tool-executor",
}
"""Each service's durable: on the inbound stream (the gateway) or on every log stream."""


async def deliveries(operator: Bus) -> dict[str, int]:
    """Each service's durable consumers' deliveries so far, redeliveries included (a naked
    fact comes again: the non-holder of a session's lease hands it back), summed over the
    log's partitions (the same durable name on each partition's stream)."""
    subjects = operator.subjects
    found = {}
    for service, durable in CONSUMERS.items():
        streams = [subjects.inbound_stream] if service == "gateway" else subjects.log_streams
        found[service] = 0
        for stream in streams:
            info = await operator.js.consumer_info(stream, durable)
            found[service] += info.delivered.consumer_seq
    return found


async def measure(
    fleet: Fleet,
    cluster: Cluster,
    operator: Bus,
    load: Load,
    n: int,
    seconds: float,
    warm: int,
    perf: Path | None = None,
) -> dict[str, Any]:
    """`seconds` of the running load with `n` instances of each service (`perf`: the
    three nats-server nodes sampled by `perf record` meanwhile, into that file)."""
    await load.until_ended(load.ended + warm)
    pids = {name: fleet.pid(name) for name in fleet.procs if fleet.procs[name].poll() is None}
    pids |= {f"nats{k}": node.pid for k, node in cluster.nodes.items()}
    pids["bench"] = os.getpid()
    moves = RunnerMoves()
    load.watchers.append(moves)
    delivered = await deliveries(operator)
    raft = raft_committed(cluster) if perf is not None else {}
    before, ended, latencies = cpu_seconds(pids), load.ended, len(load.latencies)
    started = time.perf_counter()
    async with servers_sampled(perf, [node.pid for node in cluster.nodes.values()]):
        await asyncio.sleep(seconds)
    after, elapsed = cpu_seconds(pids), time.perf_counter() - started
    turns = load.ended - ended
    raft_after = raft_committed(cluster) if perf is not None else {}
    delivered_after = await deliveries(operator)
    load.watchers.remove(moves)
    symbols = perf_symbols(perf, turns) if perf is not None else {}
    ms = {name: (after[name] - before[name]) * 1000 / max(turns, 1) for name in pids}
    per_service: dict[str, float] = {}
    for name, spent in ms.items():
        group = name.rsplit("-", 1)[0] if "-" in name else name
        group = "nats-server" if group.startswith("nats") else group
        per_service[group] = per_service.get(group, 0.0) + spent
    return {
        "n": n,
        "turns": turns,
        "turns_per_s": turns / elapsed,
        "p50_ms": pct(load.latencies[latencies:], 0.5) * 1000,
        "cpu_ms_per_turn": per_service,
        "cpu_ms_per_turn_per_instance": {
            s: per_service[s] / len(fleet.alive(s)) for s in per_service if s in USER
        },
        "cpu_ms_per_turn_by_process": ms,
        "cpu_ms_per_turn_total": sum(ms.values()),
        "runner_moves_per_turn": moves.moves / max(turns, 1),
        "deliveries_per_turn": {
            s: (delivered_after[s] - delivered[s]) / max(turns, 1) for s in delivered
        },
        "server_samples_per_turn": symbols,
        "raft_entries_per_turn": {
            group: (index - raft.get(group, 0)) / max(turns, 1)
            for group, index in raft_after.items()
            if index > raft.get(group, 0)
        },
    }


@contextlib.asynccontextmanager
async def servers_sampled(out: Path | None, pids: list[int]) -> AsyncIterator[None]:
    """`perf record` (call graphs by frame pointer: nats-server is Go) of `pids` into `out`
    while the body runs; nothing when `out` is None."""
    if out is None:
        yield
        return
    pid_list = ",".join(map(str, pids))
    command = ["perf", "record", "-q", "-F", "499", "--call-graph", "fp", "-p", pid_list]
    proc = await asyncio.create_subprocess_exec(*command, "-o", str(out))
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        await proc.wait()


SERVER_CODE = "nats-server/v2/server."
"""How nats-server's own functions are named in its symbols (Go: the package path)."""
KEPT_SYMBOLS = ("syscall.Fsync", "syscall.openat", "runtime.gcBgMarkWorker")
"""Besides the server's functions: where file syncs, file opens and the GC show."""


def perf_symbols(data: Path, turns: int, top: int = 30) -> dict[str, float]:
    """The `top` nats-server functions of a `perf record` file (and `KEPT_SYMBOLS`) by
    inclusive time (what they and their callees cost), as samples per turn."""

    def report(*args: str) -> list[tuple[float, str]]:
        """(the first column, the symbol) of each line of a `perf report`."""
        options = ["--stdio", "-g", "none", "--sort", "sym", *args]
        out = subprocess.run(
            ["perf", "report", "-i", str(data), *options], capture_output=True, text=True
        ).stdout
        rows = []
        for line in out.splitlines():
            first, _, rest = line.strip().partition(" ")
            if first and not line.startswith("#") and "] " in rest:
                rows.append((float(first.rstrip("%")), rest.split("] ", 1)[1].strip()))
        return rows

    # each symbol's own samples: their sum is every sample; then each symbol's share of
    # them with its callees' (Children, Self, Symbol)
    total = sum(count for count, _ in report("--no-children", "-F", "sample,sym"))
    inclusive = sorted(report("--children"), reverse=True)
    found: dict[str, float] = {}
    for share, sym in inclusive:
        if SERVER_CODE in sym or sym in KEPT_SYMBOLS:
            name = sym.replace("github.com/nats-io/", "")
            found[name] = share / 100 * total / max(turns, 1)
    kept = sorted(found, key=lambda name: -found[name])[:top]
    return {name: found[name] for name in kept}


ACCOUNT = "TURNSTREAM"
"""The account of every stream and consumer (ops/accounts.conf)."""


def monitor(cluster: Cluster, path: str) -> list[Any]:
    """`path` of each live node's monitoring endpoint (parsed JSON)."""
    found = []
    for n, (_, http, _) in cluster.ports.items():
        if cluster.nodes[n].poll() is None:
            with urllib.request.urlopen(f"http://127.0.0.1:{http}{path}", timeout=5) as reply:
                found.append(orjson.loads(reply.read()))
    return found


def raft_committed(cluster: Cluster) -> dict[str, int]:
    """Each Raft group's committed index (the most any node has): the meta group's, every
    stream's and every consumer's, named `meta`, `<stream>` and `<stream>/<consumer>`."""
    names = {"_meta_": "meta"}
    for node in monitor(cluster, f"/jsz?acc={ACCOUNT}&streams=true&consumers=true&raft=true"):
        for account in node.get("account_details", []):
            for stream in account.get("stream_detail", []):
                names[stream.get("stream_raft_group", "")] = stream["name"]
                for consumer in stream.get("consumer_raft_groups") or []:
                    names[consumer.get("raft_group", "")] = f"{stream['name']}/{consumer['name']}"
    committed: dict[str, int] = {}
    for path in ("/raftz", f"/raftz?acc={ACCOUNT}"):
        for node in monitor(cluster, path):
            for groups in node.values():
                for group, state in groups.items():
                    name = names.get(group, group)
                    committed[name] = max(committed.get(name, 0), int(state["committed"]))
    return committed


class RunnerMoves:
    """How often a session's events come from another turn-runner than its last ones (the
    session moved: its new runner took the lease and reloaded it from the log)."""

    def __init__(self) -> None:
        self.last: dict[str, str] = {}
        self.moves = 0

    def __call__(self, session: str, kind: str, data: bytes, at: float) -> None:
        source = orjson.loads(data)["source"]
        if source.startswith("turn-runner/"):
            if self.last.get(session, source) != source:
                self.moves += 1
            self.last[session] = source


async def lease_value(kv: Any, key: str) -> str | None:
    """The owner written under `key` in the leases bucket (None: never taken, released or
    expired); read key by key (the operator may not list the bucket's keys)."""
    try:
        entry = await kv.get(key)
    except Exception:
        return None
    return entry.value.decode() if entry.value else None


async def runner_leases(operator: Bus, sessions: list[str]) -> tuple[str, dict[str, list[str]]]:
    """Which turn-runner holds each session: how it was found (`partition` leases,
    `<service>.part.<k>`, when a runner owns partitions; else per-`session` leases, or
    `none`) and lease owner → its sessions."""
    subjects = operator.subjects
    kv = await operator.js.key_value(subjects.leases_bucket)
    held: dict[str, list[str]] = {}
    if subjects.partitioned:
        for k in range(subjects.log_partitions):
            owner = await lease_value(kv, f"{RUNNER_SERVICE}.part.{k}")
            if owner is not None:
                mine = [s for s in sessions if subjects.partition_of(s) == k]
                held.setdefault(owner, []).extend(mine)
        if held:
            return "partition", held
    for session in sessions:
        owner = await lease_value(kv, f"session.{session_key(session)}")
        if owner is not None:
            held.setdefault(owner, []).append(session)
    return ("session" if held else "none"), held


def instance_of(fleet: Fleet, owner: str) -> str | None:
    """The live turn-runner a lease's owner names (its TURNSTREAM_RUNNER_ID is its instance
    name; a source-like owner, `turn-runner/<host>-<pid>/…`, names its pid)."""
    for name in fleet.alive("turn_runner"):
        if owner == name or name in owner.split("/") or f"-{fleet.pid(name)}/" in f"{owner}/":
            return name
    return None


async def handover(
    fleet: Fleet, operator: Bus, load: Load, *, restart: bool, timeout: float = 60
) -> dict[str, Any]:
    """Kill the runner holding the most sessions; each of them until a runner appends its
    next event (restart: the same runner id started again at once)."""
    await load.until_ended(load.ended + 2 * len(load.sessions))  # leases spread
    found, by_owner = await runner_leases(operator, load.sessions)
    held: dict[str, list[str]] = {}
    for owner, owned in by_owner.items():
        if (name := instance_of(fleet, owner)) is not None:
            held.setdefault(name, []).extend(owned)
    if not held:
        return {
            "leases": found,
            "error": f"no live turn-runner found holding sessions ({found} leases: "
            f"{sorted(by_owner)})",
        }
    victim = max(held, key=lambda name: len(held[name]))
    sessions = set(held[victim])
    first: dict[str, float] = {}
    resumed = asyncio.Event()

    def watch(session: str, kind: str, data: bytes, at: float) -> None:
        if session in sessions and session not in first and at > killed:
            if orjson.loads(data)["source"].startswith("turn-runner/"):
                first[session] = at - killed
                if len(first) == len(sessions):
                    resumed.set()

    fleet.kill(victim)
    killed = time.perf_counter()
    load.watchers.append(watch)
    if restart:
        fleet.start("turn_runner", name=victim)
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(resumed.wait(), timeout)
    finally:
        load.watchers.remove(watch)
    if restart:
        await fleet.ready(victim)
    times = sorted(first.values())
    return {
        "times": times,
        "leases": found,
        "killed": victim,
        "restarted": restart,
        "sessions_held": len(sessions),
        "sessions_resumed": len(times),
        "max_s": times[-1] if times else float("nan"),
        "p50_s": pct(times, 0.5),
    }


async def stored_times(reader: Bus, stream: str, first_seq: int) -> list[tuple[int, float]]:
    """Each event's sequence and server timestamp in `stream` from `first_seq` to the end,
    through an ordered consumer named in its create (no user but the setup operator may
    use the bare `CONSUMER.CREATE.<stream>`, ops/accounts.conf; the operator may not answer
    flow control)."""
    subjects = reader.subjects
    last = await log_last_seq(reader.js, subjects, stream=stream)
    found: list[tuple[int, float]] = []
    done = asyncio.Event()

    async def on_msg(msg: Any) -> None:
        meta = msg.metadata
        found.append((meta.sequence.stream, meta.timestamp.timestamp()))
        if meta.sequence.stream >= last:
            done.set()

    sub = await ordered_subscribe(
        reader.js,
        subjects.log_all,
        stream=stream,
        cb=on_msg,
        config=api.ConsumerConfig(
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=first_seq
        ),
    )
    try:
        await asyncio.wait_for(done.wait(), 60)
    finally:
        await sub.unsubscribe()
    return found


def longest_gap(times: list[tuple[int, float]]) -> float:
    return max((b[1] - a[1] for a, b in itertools.pairwise(times)), default=0.0)


async def leader_kill(
    cluster: Cluster, operator: Bus, reader: Bus, load: Load, seconds: float
) -> dict[str, Any]:
    """The busiest log stream's leader's node killed mid-load: the longest gap between
    appends stored in that stream."""
    subjects = operator.subjects
    await load.until_ended(load.ended + len(load.sessions))
    by_partition = Counter(subjects.partition_of(s) for s in load.sessions)
    busiest = max(range(subjects.log_partitions), key=lambda k: by_partition[k])
    stream = subjects.log_stream_at(busiest)
    info = await operator.js.stream_info(stream)
    node = int(info.cluster.leader.removeprefix("nats"))
    before_seq = await log_last_seq(operator.js, subjects, stream=stream)
    killed_at = time.time()
    cluster.kill9(node)
    await asyncio.sleep(seconds)
    ended_after = load.ended
    await load.until_ended(ended_after + len(load.sessions), timeout=120)
    cluster.start(node)
    stored = await stored_times(reader, stream, max(1, before_seq - 2000))
    before = [t for t in stored if t[1] <= killed_at][-1000:]
    after = [t for t in stored if t[1] > killed_at]
    new = await operator.js.stream_info(stream)
    return {
        "stream": stream,
        "stream_sessions": by_partition[busiest],
        "killed": f"nats{node}",
        "new_leader": new.cluster.leader,
        "longest_gap_after_kill_s": longest_gap(before[-1:] + after),
        "first_append_after_kill_s": (after[0][1] - killed_at) if after else float("nan"),
        "longest_gap_before_kill_s": longest_gap(before),
        "appends_compared": len(before),
    }


def spread(handovers: list[dict[str, Any]], ttl: float) -> dict[str, Any]:
    """The handover times of every kill without a restart, over all the sessions each kill
    moved (p50, p95, max), the worst kill's max, and how many sessions waited past the
    lease TTL."""
    times = sorted(
        t for h in handovers if not h.get("restarted") and "times" in h for t in h["times"]
    )
    kills = [h for h in handovers if not h.get("restarted") and "times" in h]
    maxima = sorted(h["max_s"] for h in kills)
    return {
        "kills": len(kills),
        "sessions": len(times),
        "p50_s": pct(times, 0.5),
        "p95_s": pct(times, 0.95),
        "max_s": times[-1] if times else float("nan"),
        "kill_max_p50_s": pct(maxima, 0.5),
        "over_ttl": sum(1 for t in times if t > ttl),
        "lease_ttl_s": ttl,
    }


async def instances(
    root: Path, args: Any, console: Console, log_partitions: int = 1
) -> dict[str, Any]:
    """Part 2 on a cluster of its own under `root`, the log in `log_partitions` streams."""
    subjects = Subjects(PREFIX, log_partitions)
    (root / "fleet").mkdir(parents=True)
    cluster = start_cluster(root / "fleet", subjects)
    result: dict[str, Any] = {"log_partitions": log_partitions, "by_n": {}}
    fleet = Fleet(
        cluster,
        root / "fleet",
        SCRIPT,
        **ENV,
        TURNSTREAM_LOG_PARTITIONS=str(log_partitions),
        TURNSTREAM_LEASE_TTL_S=str(args.lease_ttl),
        TURNSTREAM_LEASE_RENEW_S=str(args.lease_ttl / 3.5),
    )
    buses: list[Bus] = []
    try:
        ensure = StreamLimits(replicas=3)
        await (await connect(cluster.url("operator"), subjects, ensure=ensure)).close()
        for user in ("operator", "client", "audit"):
            buses.append(await connect(cluster.url(user), subjects))
        operator, client, reader = buses
        fleet.start("audit")
        await grow(fleet, 1)
        await fleet.ready("audit-1")
        sessions = [f"b{i}" for i in range(args.fleet_sessions)]
        load = Load(client, operator, reader, sessions, rate=args.rate)
        stop = asyncio.Event()
        async with asyncio.TaskGroup() as tasks:
            running = tasks.create_task(load.run(stop))
            try:
                for n in (1, 2, 3):
                    await grow(fleet, n)
                    perf = args.perf / f"N{log_partitions}-n{n}.data" if args.perf else None
                    row = await measure(
                        fleet, cluster, operator, load, n, args.fleet_seconds, args.warm, perf
                    )
                    result["by_n"][str(n)] = row
                    console.print(
                        f"N = {log_partitions}, n = {n}: {row['turns_per_s']:.1f} turns/s, "
                        f"{row['cpu_ms_per_turn_total']:.1f} ms CPU per turn"
                    )
                if args.no_failures:
                    return result
                await fleet.term(fleet.alive("turn_runner")[-1])  # two runners
                result["handover"] = []
                for _ in range(max(args.kills, 1)):
                    result["handover"].append(await handover(fleet, operator, load, restart=False))
                    await fleet.ready(fleet.start("turn_runner"))  # two again
                result["handover"].append(await handover(fleet, operator, load, restart=True))
                result["handover_spread"] = spread(result["handover"], args.lease_ttl)
                try:  # a failure here keeps the handover figures
                    result["leader_kill"] = await leader_kill(
                        cluster, operator, reader, load, args.fleet_seconds
                    )
                except Exception as exc:
                    result["leader_kill"] = {"error": f"{type(exc).__name__}: {exc}"}
            finally:
                stop.set()
            await running
        last = await wait_quiet(operator)
        await audit_caught_up(operator, last)
        verdict = await verify(reader, operator, load.accepted, fleet.runs("runs.txt"))
        result["correctness"] = {
            "summary": verdict.summary(),
            "accepted": len(load.accepted),
            "turns_ended": verdict.turns,
            "problems": verdict.problems,
        }
    finally:
        fleet.stop_all()
        for bus in buses:
            with contextlib.suppress(Exception):
                await bus.close()
        cluster.stop()
    return result


def report(results: dict[str, dict[str, Any]], console: Console) -> None:
    """One table, a column per (log partitions N, instances n), then each N's handover,
    leader-kill and correctness lines."""
    columns = [(p, n) for p in results for n in results[p]["by_n"]]
    rows = {(p, n): results[p]["by_n"][n] for p, n in columns}
    table = Table(
        "R3, every service × n", *(f"N = {p}, n = {n}" for p, n in columns), title_justify="left"
    )
    table.add_row("turns/s", *(f"{rows[c]['turns_per_s']:.1f}" for c in columns))
    table.add_row("turn p50, ms", *(f"{rows[c]['p50_ms']:.1f}" for c in columns))
    table.add_row(
        "runner moves/turn", *(f"{rows[c]['runner_moves_per_turn']:.2f}" for c in columns)
    )
    for service in SERVICES:
        table.add_row(
            f"deliveries/turn: {service}",
            *(f"{rows[c]['deliveries_per_turn'][service]:.2f}" for c in columns),
        )
    for service in [*SERVICES, "audit", "nats-server", "bench"]:
        cells = []
        for c in columns:
            total = rows[c]["cpu_ms_per_turn"].get(service, float("nan"))
            each = rows[c]["cpu_ms_per_turn_per_instance"].get(service)
            cells.append(f"{total:.2f}" + (f" ({each:.2f} each)" if each is not None else ""))
        table.add_row(f"CPU ms/turn: {service}", *cells)
    table.add_row(
        "CPU ms/turn: total", *(f"{rows[c]['cpu_ms_per_turn_total']:.2f}" for c in columns)
    )
    console.print(table)
    symbols = sorted(
        {sym for c in columns for sym in rows[c].get("server_samples_per_turn", {})},
        key=lambda sym: (
            -max(rows[c].get("server_samples_per_turn", {}).get(sym, 0) for c in columns)
        ),
    )
    if symbols:
        samples = Table(
            "nats-server (3 nodes), perf samples/turn at 499 Hz",
            *(f"N = {p}, n = {n}" for p, n in columns),
            title_justify="left",
        )
        for sym in symbols:
            samples.add_row(
                sym[:60],
                *(f"{rows[c]['server_samples_per_turn'].get(sym, 0):.3f}" for c in columns),
            )
        console.print(samples)
    groups = sorted(
        {g for c in columns for g in rows[c].get("raft_entries_per_turn", {})},
        key=lambda g: -max(rows[c].get("raft_entries_per_turn", {}).get(g, 0) for c in columns),
    )
    if groups:
        raft = Table(
            "Raft entries committed per turn, by group",
            *(f"N = {p}, n = {n}" for p, n in columns),
            title_justify="left",
        )
        for group in groups[:25]:
            raft.add_row(
                group, *(f"{rows[c]['raft_entries_per_turn'].get(group, 0):.3f}" for c in columns)
            )
        console.print(raft)
    for p, result in results.items():
        for h in result.get("handover", []):
            if "error" in h:
                console.print(f"N = {p}: handover [red]not measured[/]: {h['error']}")
                continue
            how = "restarted under its id" if h["restarted"] else "not restarted"
            console.print(
                f"N = {p}: handover, {h['killed']} ({h['leases']} leases) SIGKILLed, {how}: "
                f"{h['sessions_resumed']} of {h['sessions_held']} sessions' next runner event "
                f"after max {h['max_s']:.2f} s, p50 {h['p50_s']:.2f} s"
            )
        if (d := result.get("handover_spread")) and d["kills"] > 1:
            console.print(
                f"N = {p}: handover over {d['kills']} kills ({d['sessions']} sessions moved): "
                f"p50 {d['p50_s']:.2f} s, p95 {d['p95_s']:.2f} s, max {d['max_s']:.2f} s "
                f"(worst kill's max; median kill's max {d['kill_max_p50_s']:.2f} s); "
                f"{d['over_ttl']} past the {d['lease_ttl_s']:g} s lease TTL"
            )
        if (k := result.get("leader_kill")) and "error" in k:
            console.print(f"N = {p}: leader kill [red]not measured[/]: {k['error']}")
        elif k:
            console.print(
                f"N = {p}: leader kill: {k['stream']}'s ({k['stream_sessions']} sessions) "
                f"leader {k['killed']} SIGKILLed (new leader {k['new_leader']}): longest gap "
                f"between stored appends {k['longest_gap_after_kill_s']:.2f} s (first append "
                f"{k['first_append_after_kill_s']:.2f} s after the kill); before it "
                f"{k['longest_gap_before_kill_s']:.3f} s over {k['appends_compared']} appends"
            )
        if c := result.get("correctness"):
            ok = "[green]holds[/]" if not c["problems"] else f"[red]FAILS[/] {c['problems']}"
            console.print(f"N = {p}: correctness {ok}: {c['summary']}; {c['accepted']} accepted")
