"""A partitioned log (four streams) under ops/accounts.conf as derived for it
(`turnstream streams mapping --accounts`), tried as an attacker against a real nats-server.

nats-server checks a publish's rights on the subject after the account's mapping (found
with 2.15.1), so the users' rights name the mapped `ts.log.*.<Type>.*`; a publish straight
to a partition subject `ts.log.<s>.<Type>.<k>` would then be allowed and put the event in
partition k whatever the session's is. The second mapping sends such a publish to
`ts.refused.…`, which no user may publish to: refused, and stored nowhere."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import running_services
from tests.integration.test_tools_path import ROUND_TRIP, registry, script
from tests.security.conftest import SecureServer, apply_as_operator, secure_server_in
from turnstream.bus import connect
from turnstream.bus.mapping import mapping_text, partitioned_accounts
from turnstream.cli import secure
from turnstream.client import message_command, send_and_wait
from turnstream.core.subjects import Subjects
from turnstream.settings import Settings

pytestmark = pytest.mark.integration
SUBJECTS = Subjects("ts", log_partitions=4)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureServer]:
    with secure_server_in(tmp_path_factory.mktemp("nats-parts"), subjects=SUBJECTS) as server:
        yield server


@pytest.fixture(scope="module")
async def streams(server: SecureServer) -> None:
    await apply_as_operator(server, SUBJECTS)


def test_the_derived_file_is_what_streams_mapping_prints() -> None:
    shipped = secure.ACCOUNTS.read_text()
    assert mapping_text(SUBJECTS, secure.ACCOUNTS) == partitioned_accounts(shipped, SUBJECTS)


async def test_each_service_runs_a_tool_turn_on_the_partitioned_log(
    server: SecureServer, streams: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "notes.txt").write_text("the secret word is turnip\n")
    scripted = script(tmp_path, *ROUND_TRIP)

    def settings(user: str) -> Settings:
        return Settings(
            nats_url=server.url(user),
            data_dir=tmp_path,
            workspace=tmp_path / "workspace",
            security_mode="auto",
            script=scripted,
            log_partitions=SUBJECTS.log_partitions,
        )

    async with running_services(settings, tools=registry(), settle_s=0.6):
        tenant = await connect(server.url("client-acme"), SUBJECTS, name="test-acme")
        try:
            outcome = await send_and_wait(
                tenant, message_command("acme", "read my notes"), timeout=30
            )
        finally:
            await tenant.close()
    refused = [r.getMessage() for r in caplog.records if "violation" in r.getMessage().lower()]
    assert outcome.status == "completed", (outcome, refused)
    assert "turnip" in (outcome.reply or "") and refused == []


APPENDERS = ["gateway", "turn-runner", "approval", "tool-executor", "audit", "http", "client"]


@pytest.mark.parametrize("user", APPENDERS)
async def test_a_publish_straight_to_a_partition_is_refused(
    server: SecureServer, streams: None, user: str
) -> None:
    home = SUBJECTS.partition_of("acme")
    operator = await connect(server.url("operator"), SUBJECTS, name="test-operator")
    errors: list[Exception] = []

    async def on_error(exc: Exception) -> None:
        errors.append(exc)

    forger = await connect(server.url(user), SUBJECTS, name=f"forger-{user}")
    forger.nc._error_cb = on_error  # nats-py reports -ERR here
    try:
        before = [await operator.js.stream_info(s) for s in SUBJECTS.log_streams]
        for k in (home, (home + 1) % SUBJECTS.log_partitions):
            subject = f"{SUBJECTS.log('acme', 'TurnEnded')}.{k}"
            with pytest.raises(Exception):  # noqa: B017 - refused: no ack (timeout) or an error
                await forger.js.publish(subject, b'{"type": "TurnEnded"}', timeout=1.0)
        await asyncio.sleep(0.2)
        after = [await operator.js.stream_info(s) for s in SUBJECTS.log_streams]
        assert [i.state.last_seq for i in after] == [i.state.last_seq for i in before]
        text = " ".join(str(e).lower() for e in errors)
        assert "permissions violation" in text and "ts.refused.log.acme.turnended" in text, errors
    finally:
        await forger.close()
        await operator.close()
