"""One idempotencyKey, one turn: under another Nats-Msg-Id, and after the duplicate window."""

from __future__ import annotations

import asyncio

import pytest

from tests.integration.conftest import running_services, settings_for
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.client import message_command, publish_command, send_and_wait
from turnstream.core.events import InputAccepted, TurnEnded

WINDOW_S = 1.0
"""The stream's duplicate window, small so a test can outwait it."""


@pytest.fixture(scope="module")
async def services(nats_server: EmbeddedServer, bus: Bus, tmp_path_factory):
    script = tmp_path_factory.mktemp("script") / "script.yaml"
    script.write_text('replies:\n  - text: "echo: {input}"\n  - text: "again: {input}"\n')
    settings = settings_for(
        nats_server,
        tmp_path_factory.mktemp("data"),
        script=script,
        duplicate_window_s=WINDOW_S,
    )
    async with running_services(settings, bus):
        yield settings


async def turns_of(bus: Bus, session: str) -> tuple[int, int]:
    events = [s.event for s in await bus.store.read_session(session)]
    accepted = sum(isinstance(e, InputAccepted) for e in events)
    return accepted, sum(isinstance(e, TurnEnded) for e in events)


async def test_the_same_key_under_another_nats_msg_id_runs_no_second_turn(
    bus: Bus, services
) -> None:
    command = message_command("idem-1", "once", idempotency_key="idem-key-1")
    first = await send_and_wait(bus, command, timeout=10)
    assert first.completed and first.reply == "echo: once"
    await publish_command(bus, "idem-1", command, idempotency_key="another-msg-id")
    # a sender that retries this way hears back from the first turn, not a new one
    again = await send_and_wait(bus, {**command, "text": "once"}, timeout=10)
    assert again.turn_id == first.turn_id and again.reply == "echo: once"
    await asyncio.sleep(0.5)
    assert await turns_of(bus, "idem-1") == (1, 1)


async def test_a_republish_after_the_duplicate_window_runs_no_second_turn(
    bus: Bus, services
) -> None:
    command = message_command("idem-2", "later", idempotency_key="idem-key-2")
    first = await send_and_wait(bus, command, timeout=10)
    assert first.completed
    await asyncio.sleep(WINDOW_S * 2)  # JetStream forgot the Nats-Msg-Id; the gateway did not
    seq = await publish_command(bus, "idem-2", command)
    assert seq > 0
    again = await send_and_wait(bus, command, timeout=10)
    assert again.turn_id == first.turn_id
    await asyncio.sleep(0.5)
    assert await turns_of(bus, "idem-2") == (1, 1)
