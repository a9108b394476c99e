"""Issue 26 item 3, elastic under load: on the 3-node cluster (R3, the shipped configs, each
service as its own user), instances of every service are added and removed while one-tool
turns run in several dozen sessions: a 2nd and a 3rd gateway, turn-runner, approval and
tool-executor are started; then some are stopped with SIGTERM and others killed with
SIGKILL (a runner holding sessions, an executor in the middle of a tool call, an approval
instance, a gateway), while the clients keep sending; the audit's holder is stopped with
SIGTERM, then its successor killed, each time a standby taking over. Then every accepted
command's turn has ended exactly once, each tool's side effect ran at most once (a
succeeded one exactly once), the audit appended no violation, and each session's state
rebuilt from the log equals the turn-runner's live one (`turnstream replay --verify`).

The second test runs on a log in 4 partitions (the cluster with its subject mapping, the
services with TURNSTREAM_LOG_PARTITIONS=4): a 2nd turn-runner and audit join (each audit
then holds 2 partitions, `audit.part.<k>` leases), a runner holding sessions is killed,
the audits' holders are stopped and killed while a third takes every partition over, and
the runners are grown to 3 and shrunk to 1; the same checks follow. (Parametrizing the
first test over 4 partitions would double its minutes; this one changes only the
services that own partitions.)

The third test churns the turn-runners alone while a follower of the log lags (a node
SIGSTOPped for a moment, again and again): the runner holding sessions is killed and,
about when its leases expire and the survivors take its sessions over, another is
stopped. A session taken over is read from whichever replica answers a direct get; the
elastic test once lost two turns to a replica behind the leader
(`tests/integration/test_stale_reload.py` shows each way it went wrong).

Every other turn of a session calls the tool on `asked.txt`, which the allowlist does not
cover: an approval prompt, answered by the test as a client once the prompt is stored.
Progress paces the steps (turns ended, not seconds), so a slow machine runs it slower,
not differently.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import orjson
import pytest

from tests.cluster.conftest import Cluster, start_cluster
from tests.cluster.fleet import SERVICES, USER, Fleet
from tests.cluster.load import Load, audit_caught_up, verify, wait_quiet
from turnstream.bus import Bus, connect
from turnstream.core.subjects import Subjects, session_key
from turnstream.runtime.connection import stream_limits
from turnstream.settings import Settings

SUBJECTS = Subjects("ts")
PARTITIONED = Subjects("ts", log_partitions=4)
SESSIONS = 40
STEP = 20
"""Turns that end between two steps of the scaling."""
SCRIPT = """
replies:
  - tool_calls: [{name: count_run, arguments: {file: runs.txt, seconds: 0.3}}]
  - text: "done after {last_tool_result:20}"
  - tool_calls: [{name: count_run, arguments: {file: asked.txt, seconds: 0.3}}]
  - text: "asked, then {last_tool_result:20}"
"""
ENV = {
    "TURNSTREAM_SECURITY_MODE": "allowlist",
    "TURNSTREAM_ALLOWLIST": '[{"tool": "count_run", "args": {"file": "runs.txt"}}]',
    "TURNSTREAM_LEASE_TTL_S": "3",
    "TURNSTREAM_LEASE_RENEW_S": "1",
}

# nats-py drops its socket to a node killed under it without closing it; the garbage
# collector then warns at some later point of the test
pytestmark = [
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.timeout(400),
]


class ToolsInFlight:
    """Invocations started and not yet finished, with the pid of the executor running each
    (read from the events' `source`, `tool-executor/<host>-<pid>`)."""

    def __init__(self) -> None:
        self.running: dict[str, int] = {}

    def __call__(self, session: str, kind: str, data: bytes, at: float) -> None:
        if kind == "ToolInvocationStarted":
            event = orjson.loads(data)
            pid = int(event["source"].rsplit("-", 1)[1])
            self.running[event["data"]["invocationId"]] = pid
        elif kind in ("ToolInvocationSucceeded", "ToolInvocationFailed"):
            self.running.pop(orjson.loads(data)["data"]["invocationId"], None)


Scale = Callable[[Fleet, Bus, "Load", ToolsInFlight], Awaitable[list[str]]]
"""What a test does to the fleet while turns run; the steps done, in order."""


async def lease_owners(operator: Bus, keys: list[str]) -> dict[str, str]:
    """The owners written in `ts_leases` under `keys` (absent: none); read key by key (the
    operator may not list the bucket's keys)."""
    kv = await operator.js.key_value(operator.subjects.leases_bucket)
    owners = {}
    for key in keys:
        try:
            entry = await kv.get(key)
        except Exception:  # never taken, deleted or expired
            continue
        if entry.value:
            owners[key] = entry.value.decode()
    return owners


def instance(fleet: Fleet, service: str, owner: str) -> str | None:
    """The live instance of `service` a lease's owner names: its name (a turn-runner's
    TURNSTREAM_RUNNER_ID) or its pid (`<service>/<host>-<pid>/…`)."""
    for name in fleet.alive(service):
        if owner == name or f"-{fleet.pid(name)}/" in owner:
            return name
    return None


async def holding(
    fleet: Fleet, operator: Bus, sessions: list[str], service: str, prefix: str
) -> str | None:
    """A live instance of `service` holding a lease under `prefix` (`session.`,
    `approval.`) for one of `sessions`, once one does (5 s)."""
    keys = [prefix + session_key(session) for session in sessions]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for owner in (await lease_owners(operator, keys)).values():
            if (name := instance(fleet, service, owner)) is not None:
                return name
        await asyncio.sleep(0.05)
    return None


async def mid_tool(fleet: Fleet, tools: ToolsInFlight) -> tuple[str, str] | None:
    """A live executor running a tool right now and that invocation's id (10 s)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for invocation, pid in list(tools.running.items()):
            name = fleet.by_pid(pid)
            if name in fleet.alive("tool_executor"):
                return name, invocation
        await asyncio.sleep(0.005)
    return None


async def scale(fleet: Fleet, operator: Bus, load: Load, tools: ToolsInFlight) -> list[str]:
    """Grow every service to 3 instances and shrink it back to 1 while turns run; what was
    done, in order."""
    done: list[str] = []
    began = time.monotonic()

    async def then() -> None:
        print(f"{time.monotonic() - began:6.1f} s {load.ended} ended: {done[-1]}", flush=True)
        await load.until_ended(load.ended + STEP)

    await load.until_ended(STEP)
    for _ in (2, 3):
        started = [fleet.start(service) for service in SERVICES]
        for name in started:
            await fleet.ready(name)
        done.append(f"started {', '.join(started)}")
        await then()

    # The log is one partition: one audit instance holds it, the others stand by. A
    # SIGTERM hands it over at once; a SIGKILL leaves it to the lease's expiry. Each new
    # holder logs "audit caught up" once it has taken the partition over (`fleet.ready`).
    standby = fleet.start("audit")
    code = await fleet.term("audit-1")
    await fleet.ready(standby)
    done.append(f"started {standby}, SIGTERM audit-1 (exit {code}): {standby} took over")
    await then()
    standby = fleet.start("audit")
    fleet.kill("audit-2")
    await fleet.ready(standby)
    done.append(f"started {standby}, SIGKILL audit-2 (holding the log): {standby} took over")
    await then()

    runner = await holding(fleet, operator, load.sessions, "turn_runner", "session.")
    assert runner is not None, "no turn-runner holds a session lease while turns run"
    fleet.kill(runner)
    done.append(f"SIGKILL {runner} (holding sessions)")
    found = await mid_tool(fleet, tools)
    assert found is not None, "no tool call seen running"
    executor, invocation = found
    fleet.kill(executor)
    done.append(f"SIGKILL {executor} (running {invocation})")
    gateway = fleet.alive("gateway")[0]
    fleet.kill(gateway)
    done.append(f"SIGKILL {gateway}")
    approval = await holding(fleet, operator, load.sessions, "approval", "approval.")
    approval_state = "holding a prompt's session"
    if approval is None:  # no prompt open at that moment: any instance
        approval, approval_state = fleet.alive("approval")[0], "holding nothing"
    fleet.kill(approval)
    done.append(f"SIGKILL {approval} ({approval_state})")
    await then()

    for service in SERVICES:  # down to one of each, the rest drained with SIGTERM
        name = fleet.alive(service)[0]
        code = await fleet.term(name)
        done.append(f"SIGTERM {name} (exit {code})")
    await then()
    assert all(len(fleet.alive(s)) == 1 for s in SERVICES), fleet.procs
    return done


async def partitions_held(
    fleet: Fleet, operator: Bus, service: str, want: dict[str, int], timeout: float = 30
) -> dict[str, int]:
    """Until the live instances of `service` hold partitions as `want` says (instance →
    how many `<service>.part.<k>` leases), or `timeout`; what they held last."""
    subjects = operator.subjects
    user = USER[service]
    keys = [f"{user}.part.{k}" for k in range(subjects.log_partitions)]
    deadline = time.monotonic() + timeout
    while True:
        held: dict[str, int] = {}
        for owner in (await lease_owners(operator, keys)).values():
            name = instance(fleet, service, owner) or f"not live: {owner}"
            held[name] = held.get(name, 0) + 1
        if held == want or time.monotonic() > deadline:
            return held
        await asyncio.sleep(0.2)


async def runner_holding(fleet: Fleet, operator: Bus, sessions: list[str]) -> str | None:
    """A live turn-runner holding sessions: a partition lease (`turn-runner.part.<k>`,
    runners that own partitions) or, as a runner that does not, a session's lease."""
    subjects = operator.subjects
    keys = [f"{USER['turn_runner']}.part.{k}" for k in range(subjects.log_partitions)]
    for owner in (await lease_owners(operator, keys)).values():
        if (name := instance(fleet, "turn_runner", owner)) is not None:
            return name
    return await holding(fleet, operator, sessions, "turn_runner", "session.")


async def scale_partitioned(
    fleet: Fleet, operator: Bus, load: Load, tools: ToolsInFlight
) -> list[str]:
    """At 4 partitions: a 2nd turn-runner and audit join (each audit then holds 2
    partitions), a runner holding sessions is killed, the audits' holders stopped and
    killed while a third takes everything, and the runners grown and shrunk again."""
    done: list[str] = []
    began = time.monotonic()
    parts = operator.subjects.log_partitions

    async def then() -> None:
        print(f"{time.monotonic() - began:6.1f} s {load.ended} ended: {done[-1]}", flush=True)
        await load.until_ended(load.ended + STEP)

    await load.until_ended(STEP)
    assert await partitions_held(fleet, operator, "audit", {"audit-1": parts}) == {"audit-1": parts}
    started = [fleet.start("turn_runner"), fleet.start("audit")]
    for name in started:
        await fleet.ready(name)
    split = {"audit-1": parts // 2, "audit-2": parts - parts // 2}
    held = await partitions_held(fleet, operator, "audit", split)
    assert held == split, f"the audits did not share the partitions: {held}"
    done.append(f"started {', '.join(started)}: the audits hold {held}")
    await then()

    runner = await runner_holding(fleet, operator, load.sessions)
    assert runner is not None, "no turn-runner holds sessions while turns run"
    fleet.kill(runner)
    done.append(f"SIGKILL {runner} (holding sessions)")
    await then()

    standby = fleet.start("audit")
    await fleet.ready(standby)
    code = await fleet.term("audit-1")  # hands its partitions over at once
    split = {"audit-2": parts // 2, standby: parts - parts // 2}
    held = await partitions_held(fleet, operator, "audit", split)
    assert held == split, f"audit-1's partitions were not taken over: {held}"
    done.append(f"started {standby}, SIGTERM audit-1 (exit {code}): the audits hold {held}")
    await then()
    fleet.kill("audit-2")  # its partitions free once their leases expire
    held = await partitions_held(fleet, operator, "audit", {standby: parts})
    assert held == {standby: parts}, f"audit-2's partitions were not taken over: {held}"
    done.append(f"SIGKILL audit-2: {standby} holds all {parts}")
    await then()

    started = [fleet.start("turn_runner") for _ in range(3 - len(fleet.alive("turn_runner")))]
    for name in started:
        await fleet.ready(name)
    done.append(f"started {', '.join(started)}")
    await then()
    for name in fleet.alive("turn_runner")[:-1]:
        code = await fleet.term(name)
        done.append(f"SIGTERM {name} (exit {code})")
    await then()
    assert len(fleet.alive("turn_runner")) == 1, fleet.procs
    return done


async def run_elastic(
    cluster: Cluster,
    tmp_path: Path,
    subjects: Subjects,
    scale_with: Scale,
    prefix: str,
    min_turns: int,
) -> None:
    """One of each service and an audit, the load, `scale_with` while it runs, then the
    checks: every accepted command's turn ended once, side effects at most once, no audit
    violation, replay equals live; more than `min_turns` turns ran."""
    started = time.monotonic()
    setup = Settings(  # type: ignore[call-arg]
        nats_url=cluster.url("operator"), replicas=3, log_partitions=subjects.log_partitions
    )
    await (await connect(cluster.url("operator"), subjects, ensure=stream_limits(setup))).close()
    operator = await connect(cluster.url("operator"), subjects)
    client = await connect(cluster.url("client"), subjects)
    reader = await connect(cluster.url("audit"), subjects)
    env = {**ENV, "TURNSTREAM_LOG_PARTITIONS": str(subjects.log_partitions)}
    fleet = Fleet(cluster, tmp_path, SCRIPT, **env)
    try:
        for service in (*SERVICES, "audit"):
            fleet.start(service)
        for name in list(fleet.procs):
            await fleet.ready(name)
        load = Load(client, operator, reader, [f"{prefix}{i}" for i in range(SESSIONS)])
        tools = ToolsInFlight()
        load.watchers.append(tools)
        stop = asyncio.Event()
        async with asyncio.TaskGroup() as tasks:
            running = tasks.create_task(load.run(stop))
            steps = await scale_with(fleet, operator, load, tools)
            stop.set()
            await running
        print(f"{time.monotonic() - started:6.1f} s every client's last turn ended", flush=True)
        last = await wait_quiet(operator)
        await audit_caught_up(operator, last)
        print(f"{time.monotonic() - started:6.1f} s log quiet, audit caught up", flush=True)
        runs = fleet.runs("runs.txt") + fleet.runs("asked.txt")
        verdict = await verify(reader, operator, load.accepted, runs)
        report = "\n  ".join(steps)
        print(
            f"\n  {report}\n{verdict.summary()}; {len(load.accepted)} commands accepted; "
            f"{time.monotonic() - started:.0f} s"
        )
        assert not verdict.problems, f"after:\n  {report}\n{verdict.problems}"
        assert verdict.turns == len(load.accepted) > min_turns
        assert verdict.prompts > 0 and load.answered, "no approval prompt was asked"
    finally:
        fleet.stop_all()
        await client.close()
        await reader.close()
        await operator.close()


async def test_instances_come_and_go_while_turns_run(cluster: Cluster, tmp_path: Path) -> None:
    await run_elastic(cluster, tmp_path, SUBJECTS, scale, "e", 8 * STEP)


@pytest.fixture
def cluster4(tmp_path: Path) -> Iterator[Cluster]:
    """The cluster with the subject mapping and derived accounts of a 4-partition log."""
    cluster = start_cluster(tmp_path, PARTITIONED)
    try:
        yield cluster
    finally:
        cluster.stop()


async def test_partition_owners_come_and_go_while_turns_run(
    cluster4: Cluster, tmp_path: Path
) -> None:
    """The log in 4 partitions: runners and audits (which own partitions) added, killed and
    stopped while turns run, with the same checks as at one partition."""
    await run_elastic(cluster4, tmp_path, PARTITIONED, scale_partitioned, "p", 7 * STEP)


CHURN_CYCLES = 6


async def lag_followers(cluster: Cluster, operator: Bus, rng: random.Random) -> None:
    """Again and again, SIGSTOP a follower of the log's stream for 0.1-0.5 s: the direct
    gets it answers then lag behind the leader, as a busy replica's do."""
    stream = operator.subjects.log_stream
    while True:
        info = await operator.js.stream_info(stream)
        leader = info.cluster.leader if info.cluster else None
        node = rng.choice([n for n in cluster.nodes if f"nats{n}" != leader])
        cluster.nodes[node].send_signal(signal.SIGSTOP)
        try:
            await asyncio.sleep(rng.uniform(0.1, 0.5))
        finally:
            cluster.nodes[node].send_signal(signal.SIGCONT)
        await asyncio.sleep(rng.uniform(0.2, 1.0))


async def churn_runners(fleet: Fleet, operator: Bus, load: Load, tools: ToolsInFlight) -> list[str]:
    """Each cycle: back to 3 runners; the one holding sessions killed; about when its
    leases expire (the survivors take its sessions over), another stopped with SIGTERM,
    handing its own over; all while a follower of the log lags."""
    done: list[str] = []
    rng = random.Random(26)
    lagging = asyncio.create_task(lag_followers(fleet.cluster, operator, rng))
    try:
        await load.until_ended(STEP)
        for cycle in range(CHURN_CYCLES):
            while len(fleet.alive("turn_runner")) < 3:
                await fleet.ready(fleet.start("turn_runner"))
            await load.until_ended(load.ended + STEP)
            runner = await holding(fleet, operator, load.sessions, "turn_runner", "session.")
            assert runner is not None, "no turn-runner holds a session lease while turns run"
            fleet.kill(runner)
            await asyncio.sleep(rng.uniform(2.2, 3.6))  # the lease TTL is 3 s
            other = fleet.alive("turn_runner")[0]
            code = await fleet.term(other)
            done.append(f"cycle {cycle}: SIGKILL {runner}, then SIGTERM {other} (exit {code})")
            print(f"{load.ended} ended: {done[-1]}", flush=True)
            await load.until_ended(load.ended + STEP)
    finally:
        lagging.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await lagging
    return done


async def test_runners_come_and_go_while_a_replica_lags(cluster: Cluster, tmp_path: Path) -> None:
    await run_elastic(cluster, tmp_path, SUBJECTS, churn_runners, "r", 5 * STEP)
