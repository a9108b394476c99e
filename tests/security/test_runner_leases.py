"""The turn-runner's leases under the shipped `ops/accounts.conf`, on a real nats-server:
the `turn-runner` user keeps its own (`session.<id>` on a log of one stream,
`turn-runner.part.<k>` and `turn-runner.member.<id>` on a partitioned one) and, as an
attacker, cannot write approval's (`approval.<id>`) or the audit's (`audit.part.<k>`);
under the file derived for four partitions, a runner holds the partitions as its own user
and binds their consumers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.polling import eventually
from tests.security.conftest import SecureServer, apply_as_operator, secure_server_in
from tests.security.test_approval_leases import _collect
from tests.security.test_identities import as_user
from turnstream.bus import connect
from turnstream.bus.leases import LeaseTable, Ownership
from turnstream.core.subjects import Subjects
from turnstream.core.turn import TurnConfig
from turnstream.providers.scripted import ScriptedProvider, load_script
from turnstream.turn_runner.app import DURABLE, Runner
from turnstream.turn_runner.ownership import SERVICE, PartitionSessions

pytestmark = pytest.mark.integration
SUBJECTS = Subjects("ts")
PARTITIONED = Subjects("ts", log_partitions=4)


@pytest.mark.parametrize("namespace", ["approval", "audit.part"])
async def test_the_runner_user_cannot_write_another_service_s_lease(
    secure_server: SecureServer, namespace: str
) -> None:
    await apply_as_operator(secure_server)
    operator = await as_user(secure_server, "operator")
    attacker = await as_user(secure_server, "turn-runner")
    errors: list[Exception] = []
    attacker.nc._error_cb = _collect(errors)  # nats-py reports -ERR here
    stream = f"KV_{SUBJECTS.leases_bucket}"
    try:
        before = (await operator.js.stream_info(stream)).state.last_seq
        leases = LeaseTable(attacker.js, SUBJECTS, "runner-attacker", ttl_s=5, namespace=namespace)
        with pytest.raises(Exception):  # noqa: B017 - refused: no ack (timeout) or an error
            await leases.ensure("0")
        await asyncio.sleep(0.2)
        after = (await operator.js.stream_info(stream)).state.last_seq
        assert after == before, f"a {namespace} lease was written by the turn-runner user"
        assert any("permissions violation" in str(e).lower() for e in errors), errors
    finally:
        await attacker.close()
        await operator.close()


@pytest.mark.parametrize("namespace", ["session", f"{SERVICE}.part", f"{SERVICE}.member"])
async def test_the_runner_user_keeps_its_own_leases(
    secure_server: SecureServer, namespace: str
) -> None:
    await apply_as_operator(secure_server)
    bus = await as_user(secure_server, "turn-runner")
    errors: list[Exception] = []
    bus.nc._error_cb = _collect(errors)
    leases = LeaseTable(bus.js, SUBJECTS, "turn-runner/a", ttl_s=5, namespace=namespace)
    heard: list[tuple[str, str | None]] = []
    stop = asyncio.Event()
    try:
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(
                leases.watch_expiries(lambda _k: None, stop, lambda k, o: heard.append((k, o)))
            )
            assert await leases.ensure("1") is Ownership.NEW
            assert await leases.renew("1")
            # the watch hears a lease taken before it started too: it is up once it did
            await eventually(lambda: ("1", "turn-runner/a") in heard)
            await leases.release("1", hand_over=True)
            await eventually(lambda: heard[-1] == ("1", None))
            stop.set()
    finally:
        await bus.close()
    assert ("1", "turn-runner/a") in heard and heard[-1] == ("1", None), heard
    assert errors == []


@pytest.fixture(scope="module")
def partitioned_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureServer]:
    store = tmp_path_factory.mktemp("nats-runner-parts")
    with secure_server_in(store, subjects=PARTITIONED) as server:
        yield server


async def test_a_runner_holds_its_partitions_as_its_own_user(
    partitioned_server: SecureServer,
) -> None:
    await apply_as_operator(partitioned_server, PARTITIONED)
    bus = await connect(partitioned_server.url("turn-runner"), PARTITIONED, name="test-runner")
    operator = await connect(partitioned_server.url("operator"), PARTITIONED, name="test-op")
    errors: list[Exception] = []
    bus.nc._error_cb = _collect(errors)
    runner = Runner(bus, ScriptedProvider(load_script(None)), TurnConfig())
    assert isinstance(runner.ownership, PartitionSessions)
    stop = asyncio.Event()
    try:
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(runner.serve(stop))
            async with asyncio.timeout(15):
                while runner.ownership.held != [0, 1, 2, 3]:  # noqa: ASYNC110 (another task's)
                    await asyncio.sleep(0.1)
            kv = await operator.js.key_value(PARTITIONED.leases_bucket)
            for k in range(4):
                assert (await kv.get(f"{SERVICE}.part.{k}")).value.startswith(b"turn-runner/")
                info = await operator.js.consumer_info(PARTITIONED.log_stream_at(k), DURABLE)
                assert info.push_bound
            stop.set()
    finally:
        await bus.close()
        await operator.close()
    assert [e for e in errors if "violation" in str(e).lower()] == []
