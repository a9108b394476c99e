"""Tenants kept apart (issue 23 item 1): each user's replies come on its own inbox prefix,
which ops/accounts.conf lets it alone read, so a tenant listening on `_INBOX.>` or `>`
hears nothing of a turn run by another user."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.security.conftest import SecureServer
from tests.security.test_identities import as_user, services_as_themselves, streams
from turnstream.bus import Bus
from turnstream.bus.connection import inbox_of
from turnstream.bus.permissions import answered
from turnstream.client import message_command, publish_command
from turnstream.core.events import TurnEnded

__all__ = ["streams"]  # test_identities' fixture, used here too


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "notes.txt").write_text("the secret word is turnip\n")
    return tmp_path


async def ended_turn(bus: Bus, session: str, timeout: float = 20) -> TurnEnded:
    """The session's first `TurnEnded`, read from the log."""
    async with asyncio.timeout(timeout):
        while True:
            for stored in await bus.store.read_session(session):
                if isinstance(stored.event, TurnEnded):
                    return stored.event
            await asyncio.sleep(0.2)


async def test_a_tenant_hears_nothing_of_another_users_turn(
    secure_server: SecureServer, tmp: Path
) -> None:
    async with services_as_themselves(secure_server, tmp):
        spy = await as_user(secure_server, "client-acme")
        heard: list[str] = []

        async def on_msg(msg: Any) -> None:
            heard.append(f"{msg.subject}: {bytes(msg.data)[:80]!r}")

        try:
            for subject in ("_INBOX.>", ">", "_INBOX.client.>", "_INBOX.http.>"):
                await spy.nc.subscribe(subject, cb=on_msg)
            await spy.nc.subscribe(inbox_of("client-acme") + ".>", cb=on_msg)
            await answered(spy.nc)
            for subject in ("_INBOX.>", ">", "_INBOX.client.>", "_INBOX.http.>"):
                assert spy.refusals.denied("subscription", subject) is not None, subject
            assert spy.refusals.denied("subscription", "_INBOX.client-acme.>") is None

            # another user's turn: sent as `client`, its end read as `operator` (direct
            # gets answered on the operator's inbox), the services' own requests between
            client = await as_user(secure_server, "client")
            operator = await as_user(secure_server, "operator")
            try:
                await publish_command(client, "globex", message_command("globex", "notes"))
                ended = await ended_turn(operator, "globex")
            finally:
                await client.close()
                await operator.close()
            assert ended.data.status == "completed" and "turnip" in (ended.data.reply or "")
            await asyncio.sleep(0.3)
        finally:
            await spy.close()
    assert heard == [], heard[:5]


async def test_each_user_connects_with_its_own_inbox_prefix(
    secure_server: SecureServer, streams: None
) -> None:
    bus = await as_user(secure_server, "client-acme")
    try:
        assert bus.nc.new_inbox().startswith("_INBOX.client-acme.")
        # a request's reply comes back on that prefix (JetStream's answer to a publish)
        ack = await bus.js.publish(
            "ts.in.acme", b"{}", headers={"Nats-Msg-Id": "inbox-prefix-probe"}
        )
        assert ack.stream == "TS_INBOUND"
    finally:
        await bus.close()
