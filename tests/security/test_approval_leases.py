"""The approval service's session leases under the shipped `ops/accounts.conf`, on a real
nats-server: the `approval` user keeps leases in its own namespace (`approval.<session>`)
and, as an attacker, cannot write the turn-runner's (`session.<session>`)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.security.conftest import SecureServer, apply_as_operator
from tests.security.test_identities import as_user, services_as_themselves
from turnstream.bus.leases import LeaseTable, Ownership
from turnstream.client import (
    answer_command,
    message_command,
    pending_prompts,
    publish_command,
    send_and_wait,
)
from turnstream.core.subjects import Subjects

SUBJECTS = Subjects("ts")


def _collect(errors: list[Exception]):  # type: ignore[no-untyped-def]
    async def on_error(exc: Exception) -> None:
        errors.append(exc)

    return on_error


async def test_the_approval_user_cannot_write_a_runner_lease(secure_server: SecureServer) -> None:
    await apply_as_operator(secure_server)
    operator = await as_user(secure_server, "operator")
    attacker = await as_user(secure_server, "approval")
    errors: list[Exception] = []
    attacker.nc._error_cb = _collect(errors)  # nats-py reports -ERR here
    stream = f"KV_{SUBJECTS.leases_bucket}"
    try:
        before = (await operator.js.stream_info(stream)).state.last_seq
        subject = f"$KV.{SUBJECTS.leases_bucket}.session.victim"
        with pytest.raises(Exception):  # noqa: B017 - refused: no ack (timeout) or an error
            await attacker.js.publish(subject, b"approval-attacker", timeout=1.0)
        runner_leases = LeaseTable(attacker.js, SUBJECTS, "approval-attacker", ttl_s=5)
        with pytest.raises(Exception):  # noqa: B017 - the same through the lease table
            await runner_leases.ensure("victim")
        await asyncio.sleep(0.2)
        after = (await operator.js.stream_info(stream)).state.last_seq
        assert after == before, "a runner lease was written by the approval user"
        assert any("permissions violation" in str(e).lower() for e in errors), errors
        assert any(subject.lower() in str(e).lower() for e in errors), errors
    finally:
        await attacker.close()
        await operator.close()


async def test_the_approval_user_keeps_leases_in_its_own_namespace(
    secure_server: SecureServer,
) -> None:
    await apply_as_operator(secure_server)
    bus = await as_user(secure_server, "approval")
    errors: list[Exception] = []
    bus.nc._error_cb = _collect(errors)
    leases = LeaseTable(bus.js, SUBJECTS, "approval-a", ttl_s=5, namespace="approval")
    heard: list[tuple[str, str | None]] = []
    stop = asyncio.Event()
    try:
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(
                leases.watch_expiries(lambda _s: None, stop, lambda s, o: heard.append((s, o)))
            )
            assert await leases.ensure("mine") is Ownership.NEW
            assert await leases.renew("mine")
            await leases.release("mine", hand_over=True)
            assert await leases.ensure("mine") is Ownership.NEW
            await leases.release("mine")
            await asyncio.sleep(0.5)
            stop.set()
    finally:
        await bus.close()
    assert ("mine", "approval-a") in heard and heard[-1] == ("mine", None), heard
    assert errors == []


async def test_a_prompt_is_asked_and_answered_with_each_service_as_its_own_user(
    secure_server: SecureServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "notes.txt").write_text("the secret word is turnip\n")
    async with services_as_themselves(secure_server, tmp_path, security_mode="ask"):
        tenant = await as_user(secure_server, "client-acme")
        operator = await as_user(secure_server, "operator")
        try:
            turn = asyncio.create_task(
                send_and_wait(tenant, message_command("acme", "read my notes"), timeout=30)
            )
            pending: list[dict[str, object]] = []
            async with asyncio.timeout(20):
                while not pending:
                    await asyncio.sleep(0.2)
                    pending = await pending_prompts(operator, "acme")
            [prompt] = pending
            kv = await operator.js.key_value(SUBJECTS.leases_bucket)
            assert (await kv.get("approval.acme")).value.startswith(b"approval/")
            answer = answer_command("acme", str(prompt["interactionId"]), "approve")
            await publish_command(tenant, "acme", answer)
            outcome = await turn
        finally:
            for bus in (operator, tenant):
                await bus.close()
    refused = [r.getMessage() for r in caplog.records if "violation" in r.getMessage().lower()]
    assert outcome.status == "completed", (outcome, refused)
    assert refused == []
