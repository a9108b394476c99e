"""Attachments under the shipped `ops/accounts.conf`, every service as its own user: a
tenant's inline image is stored by the gateway and its turn runs; the tenant
itself may not write into the object store (where tool results and archives live), so a
sender can neither plant bytes under an attachment's name nor overwrite another object."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest

from tests.integration.test_attachments import PNG
from tests.security.conftest import SecureServer
from tests.security.test_identities import as_user, services_as_themselves
from turnstream.bus.objects import read_object
from turnstream.client import attachment, message_command, send_and_wait

pytestmark = pytest.mark.integration


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    (tmp_path / "workspace").mkdir()
    return tmp_path


async def test_a_tenants_inline_image_is_stored_by_the_gateway_and_the_tenant_writes_no_object(
    secure_server: SecureServer, tmp: Path
) -> None:
    async with services_as_themselves(secure_server, tmp):
        tenant = await as_user(secure_server, "client-acme")
        try:
            command = message_command("acme", "read my notes") | {
                "attachments": [attachment("pic.png", "image/png", PNG)]
            }
            outcome = await send_and_wait(tenant, command, timeout=20)
            assert outcome.status == "completed", outcome
            name = "att/" + hashlib.sha256(PNG).hexdigest()
            with pytest.raises(Exception, match=r"(?i)permission|authoriz|timeout|no response"):
                blobs = await tenant.blobs()
                await blobs.put(name, b"planted " + base64.b64encode(PNG))
        finally:
            await tenant.close()
    runner = await as_user(secure_server, "turn-runner")  # reads it as a model call does
    try:
        stored = await read_object(runner, name)
        assert stored == PNG  # the gateway's, not the tenant's
    finally:
        await runner.close()
