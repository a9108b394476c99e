"""The audit's partition leases under the shipped `ops/accounts.conf`, on a real
nats-server: the `audit` user keeps its own (`audit.part.<k>`, `audit.member.<id>`) and,
as an attacker, cannot write a turn-runner's (`session.<id>`) or approval's
(`approval.<id>`); the audit service holds its partition as its own user."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.polling import eventually
from tests.security.conftest import SecureServer, apply_as_operator
from tests.security.test_approval_leases import _collect
from tests.security.test_identities import as_user
from turnstream.audit import app as audit
from turnstream.bus.leases import LeaseTable, Ownership
from turnstream.core.subjects import Subjects
from turnstream.settings import Settings

SUBJECTS = Subjects("ts")


@pytest.mark.parametrize("namespace", ["session", "approval"])
async def test_the_audit_user_cannot_write_another_service_s_lease(
    secure_server: SecureServer, namespace: str
) -> None:
    await apply_as_operator(secure_server)
    operator = await as_user(secure_server, "operator")
    attacker = await as_user(secure_server, "audit")
    errors: list[Exception] = []
    attacker.nc._error_cb = _collect(errors)  # nats-py reports -ERR here
    stream = f"KV_{SUBJECTS.leases_bucket}"
    try:
        before = (await operator.js.stream_info(stream)).state.last_seq
        subject = f"$KV.{SUBJECTS.leases_bucket}.{namespace}.victim"
        with pytest.raises(Exception):  # noqa: B017 - refused: no ack (timeout) or an error
            await attacker.js.publish(subject, b"audit-attacker", timeout=1.0)
        leases = LeaseTable(attacker.js, SUBJECTS, "audit-attacker", ttl_s=5, namespace=namespace)
        with pytest.raises(Exception):  # noqa: B017 - the same through the lease table
            await leases.ensure("victim")
        await asyncio.sleep(0.2)
        after = (await operator.js.stream_info(stream)).state.last_seq
        assert after == before, f"a {namespace} lease was written by the audit user"
        assert any("permissions violation" in str(e).lower() for e in errors), errors
    finally:
        await attacker.close()
        await operator.close()


async def test_the_audit_user_keeps_its_partition_and_member_leases(
    secure_server: SecureServer,
) -> None:
    await apply_as_operator(secure_server)
    bus = await as_user(secure_server, "audit")
    errors: list[Exception] = []
    bus.nc._error_cb = _collect(errors)
    parts = LeaseTable(bus.js, SUBJECTS, "audit/a", ttl_s=5, namespace="audit.part")
    members = LeaseTable(bus.js, SUBJECTS, "audit/a", ttl_s=5, namespace="audit.member")
    heard: list[tuple[str, str | None]] = []
    stop = asyncio.Event()
    try:
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(
                parts.watch_expiries(lambda _k: None, stop, lambda k, o: heard.append((k, o)))
            )
            assert await members.ensure("audit_a") is Ownership.NEW
            assert await parts.ensure("0") is Ownership.NEW
            assert await parts.renew("0") and await members.renew("audit_a")
            # the watch hears a lease taken before it started too: it is up once it did
            await eventually(lambda: ("0", "audit/a") in heard)
            await parts.release("0", hand_over=True)
            await members.release("audit_a", hand_over=True)
            await eventually(lambda: heard[-1] == ("0", None))
            stop.set()
    finally:
        await bus.close()
    assert ("0", "audit/a") in heard and heard[-1] == ("0", None), heard
    assert errors == []


async def test_the_audit_service_holds_its_partition_as_its_own_user(
    secure_server: SecureServer, tmp_path: Path
) -> None:
    await apply_as_operator(secure_server)
    bus = await as_user(secure_server, "audit")
    operator = await as_user(secure_server, "operator")
    errors: list[Exception] = []
    bus.nc._error_cb = _collect(errors)
    settings = Settings(data_dir=tmp_path)
    service = audit.AuditService(bus, audit.check_config(settings), tmp_path, settings=settings)
    stop = asyncio.Event()
    try:
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(service.serve(stop))
            kv = await operator.js.key_value(SUBJECTS.leases_bucket)
            async with asyncio.timeout(15):
                while 0 not in service.workers:  # noqa: ASYNC110 (another task's state)
                    await asyncio.sleep(0.1)
            assert (await kv.get("audit.part.0")).value.startswith(b"audit/")
            stop.set()
    finally:
        await bus.close()
        await operator.close()
    refused = [e for e in errors if "violation" in str(e).lower()]
    assert refused == []
    assert (tmp_path / "audit.jsonl").exists()
