"""A 3-node cluster (R3, fsync always): turns in flight while the TS_LOG leader's node is
killed with SIGKILL; every turn ends exactly once, every acked command is kept, and the
node catches up when it comes back."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import nats.errors
import orjson
import pytest
from nats.js.errors import NoStreamResponseError

from tests.cluster.conftest import Cluster
from tests.integration.conftest import running_services
from turnstream.approval import app as approval
from turnstream.bus import Bus, connect
from turnstream.bus.scan import subject_counts
from turnstream.client import message_command, publish_command
from turnstream.core.subjects import Subjects
from turnstream.gateway import app as gateway
from turnstream.runtime.connection import stream_limits
from turnstream.settings import Settings

SUBJECTS = Subjects("ts")
TURNS = 200

# nats-py drops its socket to a node killed under it without closing it (it reconnects to
# another node); the garbage collector then warns at some later point of the test
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def settings(cluster: Cluster, user: str, tmp: Path) -> Settings:
    script = tmp / "script.yaml"
    if not script.exists():
        script.write_text('replies:\n  - {text: "hello from the cluster"}\n')
    return Settings(  # type: ignore[call-arg]
        nats_url=cluster.url(user),
        data_dir=tmp,
        workspace=tmp,
        replicas=3,
        security_mode="auto",
        script=script,
    )


def services(cluster: Cluster, tmp: Path) -> AbstractAsyncContextManager[None]:
    return running_services(lambda user: settings(cluster, user, tmp), settle_s=1.0)


async def send_retrying(client: Bus, command: dict[str, object]) -> int:
    """Publish until acked: while the stream elects a leader the server has no responder;
    the idempotency key (Nats-Msg-Id) keeps a retry from adding a second command."""
    for _ in range(100):
        try:
            return await publish_command(client, str(command["sessionId"]), command)
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError, NoStreamResponseError):
            await asyncio.sleep(0.1)
    raise AssertionError("the cluster never took the command")


async def ended_in_log(operator: Bus, sessions: Iterable[str], timeout: float) -> set[str]:
    """Wait until every session's TurnEnded is stored in the log (or `timeout` passes); the
    sessions it is stored for. A TurnEnded that core subscribers saw is not enough: a publish
    reaches them even when the stream did not store it (the runner then appends it again)."""
    wanted, deadline = set(sessions), time.monotonic() + timeout
    ended: set[str] = set()
    while True:
        with contextlib.suppress(nats.errors.TimeoutError):  # no leader for a moment
            counts = await subject_counts(
                operator.nc, SUBJECTS.log_stream, SUBJECTS.log_kind("TurnEnded")
            )
            ended = {SUBJECTS.session_from_log(subject) for subject in counts} & wanted
        if ended == wanted or time.monotonic() > deadline:
            return ended
        await asyncio.sleep(0.5)


async def not_ended_once(operator: Bus, sessions: Iterable[str]) -> dict[str, list[str]]:
    """The sessions whose log does not hold exactly one `TurnEnded`, with their events' types."""
    unended: dict[str, list[str]] = {}
    for session in sessions:
        kinds = [s.event.type for s in await operator.store.read_session(session)]
        if kinds.count("TurnEnded") != 1:
            unended[session] = kinds
    return unended


async def leader(operator: Bus) -> int:
    info = await operator.js.stream_info(SUBJECTS.log_stream)
    return int(info.cluster.leader.removeprefix("nats"))


async def test_killing_the_log_leader_loses_no_turn(cluster: Cluster, tmp_path: Path) -> None:
    ensure = settings(cluster, "turn-runner", tmp_path)
    # the setup step, as the operator (services only check the streams exist)
    first = await connect(cluster.url("operator"), SUBJECTS, ensure=stream_limits(ensure))
    await first.close()
    operator = await connect(cluster.url("operator"), SUBJECTS)
    client = await connect(cluster.url("client"), SUBJECTS)
    try:
        acked: dict[str, int] = {}
        started = time.monotonic()
        async with services(cluster, tmp_path):
            for i in range(TURNS):  # all in flight: sent without waiting for any turn
                session = f"c{i}"
                acked[session] = await send_retrying(client, message_command(session, "hi"))
                if i == TURNS // 4:
                    killed = await leader(operator)
                    cluster.kill9(killed)
            ended = await ended_in_log(operator, acked, timeout=90)
            elapsed = time.monotonic() - started
            assert len(ended) == TURNS, f"{TURNS - len(ended)} turns never ended"

            cluster.start(killed)
            # the restarted node catches up: its replica is current, with no lag
            deadline = time.monotonic() + 30
            while True:
                info = await operator.js.stream_info(SUBJECTS.log_stream)
                peers = {r.name: r for r in info.cluster.replicas or []}
                if info.cluster.leader == f"nats{killed}" or (
                    f"nats{killed}" in peers
                    and peers[f"nats{killed}"].current
                    and not peers[f"nats{killed}"].lag
                ):
                    break
                assert time.monotonic() < deadline, info.cluster
                await asyncio.sleep(0.2)

        # every command the client saw acked is still in TS_INBOUND at its acked sequence
        for session, seq in acked.items():
            stored = await operator.js.get_msg(SUBJECTS.inbound_stream, seq)
            assert stored.subject == SUBJECTS.inbound(session)
            assert orjson.loads(stored.data)["sessionId"] == session
        # every turn ended exactly once in the log itself: a TurnEnded a subscriber saw is
        # not enough (a publish reaches core subscribers even when the stream refused it)
        unended = await not_ended_once(operator, acked)
        assert not unended, f"{len(unended)} of {TURNS} turns not ended once in the log: {unended}"
        print(f"\n{TURNS} turns, leader nats{killed} killed: {TURNS / elapsed:.0f} turns/s")
    finally:
        await client.close()
        await operator.close()


def runner_process(cluster: Cluster, tmp: Path, runner_id: str) -> subprocess.Popen[bytes]:
    """A turn-runner of its own (python -m tests.recovery.procs) as the turn-runner user."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTREAM_")}
    env.update(
        TURNSTREAM_NATS_URL=cluster.url("turn-runner"),
        TURNSTREAM_REPLICAS="3",
        TURNSTREAM_DATA_DIR=str(tmp),
        TURNSTREAM_WORKSPACE=str(tmp),
        TURNSTREAM_SCRIPT=str(tmp / "script.yaml"),
        TURNSTREAM_PROVIDER="scripted",
        TURNSTREAM_RUNNER_ID=runner_id,
        TURNSTREAM_LEASE_TTL_S="3",
        TURNSTREAM_LEASE_RENEW_S="1",
        TURNSTREAM_CONFIG=str(tmp / "absent.yaml"),
    )
    with open(tmp / f"{runner_id}.log", "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.recovery.procs", "turn_runner"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=Path(__file__).parents[2],
        )


async def test_two_runners_one_killed_every_turn_ends_once(
    cluster: Cluster, tmp_path: Path
) -> None:
    ensure = settings(cluster, "turn-runner", tmp_path)  # writes the script too
    # the setup step, as the operator (services only check the streams exist)
    first = await connect(cluster.url("operator"), SUBJECTS, ensure=stream_limits(ensure))
    await first.close()
    operator = await connect(cluster.url("operator"), SUBJECTS)
    client = await connect(cluster.url("client"), SUBJECTS)
    try:
        runners = [runner_process(cluster, tmp_path, f"r{n}") for n in (1, 2)]
        stop = asyncio.Event()
        try:
            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(gateway.serve(settings(cluster, "gateway", tmp_path), stop))
                tasks.create_task(approval.serve(settings(cluster, "approval", tmp_path), stop))
                deadline = time.monotonic() + 30
                for n in (1, 2):  # both runners consume before the first command
                    log = tmp_path / f"r{n}.log"
                    while " consuming " not in log.read_text():
                        assert time.monotonic() < deadline, log.read_text()
                        await asyncio.sleep(0.1)
                sessions = [f"r{i}" for i in range(TURNS)]
                for i, session in enumerate(sessions):
                    await send_retrying(client, message_command(session, "hi"))
                    if i == TURNS // 4:
                        runners[0].send_signal(signal.SIGKILL)
                await ended_in_log(operator, sessions, timeout=60)
                stop.set()
        finally:
            for runner in runners:
                if runner.poll() is None:
                    runner.terminate()
                runner.wait(timeout=10)
        unended = await not_ended_once(operator, sessions)
        assert not unended, f"{len(unended)} of {TURNS} turns not ended once in the log: {unended}"
        runners_of = {
            s.event.source
            for session in sessions[:20]
            for s in await operator.store.read_session(session)
        }
        print(f"\nsources of the first 20 sessions' events: {sorted(runners_of)}")
    finally:  # a failed assertion must not leak its connections into later tests
        await client.close()
        await operator.close()


async def test_two_appenders_fast_batches_do_not_collide(cluster: Cluster, tmp_path: Path) -> None:
    """The server keys an open fast-ingest batch by its reply's key token, not by the
    connection: two runners' appenders must not draw the same keys (at R3 they did, and
    their batches timed out)."""
    ensure = settings(cluster, "turn-runner", tmp_path)
    first = await connect(cluster.url("operator"), SUBJECTS, ensure=stream_limits(ensure))
    await first.close()
    runners = [await connect(cluster.url("turn-runner"), SUBJECTS) for _ in range(2)]
    try:

        async def decisions(bus: Bus, name: str) -> None:
            for round_ in range(4):
                batches = [
                    [(SUBJECTS.log(f"{name}-{s}", "StagePreFired"), b'{"r":%d}' % round_, {})] * 3
                    for s in range(32)
                ]
                await asyncio.gather(
                    *(bus.store.appender.publish_batch(items, 5.0) for items in batches)
                )

        await asyncio.gather(*(decisions(bus, f"r{n}") for n, bus in enumerate(runners)))
    finally:
        for bus in runners:
            await bus.close()


async def test_a_connection_given_one_node_reconnects_to_the_nodes_it_learns_of(
    cluster: Cluster,
) -> None:
    """A service given one node's URL learns the others from the cluster (their client URLs
    come without credentials); when its node dies it reconnects to one of them as its own
    user, so the credentials go with every server, not only the URL's."""
    first = cluster.url("client").split(",")[0]
    port = int(first.rsplit(":", 1)[1])
    bus = await connect(first, SUBJECTS)
    try:
        async with asyncio.timeout(10):
            while len(bus.nc.servers) < 3:  # noqa: ASYNC110 (the others, from the server's INFO)
                await asyncio.sleep(0.05)
        cluster.kill9(next(n for n, (client, _, _) in cluster.ports.items() if client == port))
        async with asyncio.timeout(30):  # with the URL's credentials alone: refused for ever
            while not bus.nc.is_connected or bus.nc.connected_url.port == port:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        await bus.nc.flush(timeout=5)
    finally:
        await bus.close()
