"""`turnstream send` as a client (issue 23 item 3), the real command against the shipped
ops/accounts.conf: it connects without creating anything, follows its turn as a tenant,
sends only as `client` (which may not read the log), and names a refused publish."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.security.conftest import SecureServer
from tests.security.test_cli_roles import cli
from tests.security.test_identities import services_as_themselves

pytestmark = pytest.mark.integration
TURNSTREAM = str(Path(sys.executable).parent / "turnstream")


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "notes.txt").write_text("the secret word is turnip\n")
    return tmp_path


async def send(server: SecureServer, user: str, tmp: Path, *args: str) -> tuple[int, str]:
    """`turnstream send ARGS` as `user`: its exit code and what it printed."""
    return await cli(server, user, tmp, "send", *args)


async def test_turnstream_send_as_clients(secure_server: SecureServer, tmp: Path) -> None:
    async with services_as_themselves(secure_server, tmp):
        code, out = await send(secure_server, "client-acme", tmp, "acme", "read my notes")
        assert code == 0 and "completed" in out and "turnip" in out, out

        code, out = await send(secure_server, "client-acme", tmp, "globex", "hello")
        assert code == 2, out
        assert "NATS user 'client-acme' may not publish to ts.in.globex" in out, out
        assert "TimeoutError" not in out and "no answer" not in out

        code, out = await send(secure_server, "client", tmp, "c-1", "read my notes")
        assert code == 0 and "sent" in out and "inbound seq" in out, out
        assert "NATS user 'client' may not subscribe to ts.log.c-1.>" in out, out
        assert "permissions violation" not in out.lower(), out  # said once, in its words
    assert secure_server.passwords["client"] not in out
