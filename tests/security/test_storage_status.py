"""`turnstream status` under the shipped accounts (docs/operations.md, "The log full"): as
the operator and as the admin, every service process, each as its own NATS user, answers
with its storage alarm, and each stream's size is read; no permission is violated."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.security.conftest import SecureServer
from tests.security.test_identities import as_user, services_as_themselves
from turnstream.bus.full import ALARM, storage_usage

pytestmark = pytest.mark.integration
SERVICES = {"gateway", "turn-runner", "tool-executor", "approval", "audit"}


@pytest.mark.parametrize("user", ["operator", "admin"])
async def test_every_service_answers_status_with_its_storage_alarm(
    secure_server: SecureServer, tmp_path: Path, caplog: pytest.LogCaptureFixture, user: str
) -> None:
    (tmp_path / "workspace").mkdir()
    ALARM.runs.clear()  # in-process services share the process's alarm with earlier tests
    async with services_as_themselves(secure_server, tmp_path):
        bus = await as_user(secure_server, user)
        try:
            usage = await storage_usage(bus.nc, bus.js, bus.subjects)
        finally:
            await bus.close()
    assert {p["service"] for p in usage["processes"]} == SERVICES, usage["processes"]
    assert not any(p["full"] for p in usage["processes"])
    assert {"TS_LOG", "TS_INBOUND"} <= {s["stream"] for s in usage["streams"]}
    refused = [r.getMessage() for r in caplog.records if "violation" in r.getMessage().lower()]
    assert refused == []
