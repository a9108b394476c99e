from __future__ import annotations

import pytest

from tests.integration.conftest import running_services, settings_for
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.client import message_command, send_and_wait
from turnstream.core.events import TurnEnded


@pytest.fixture(scope="module")
async def services(nats_server: EmbeddedServer, bus: Bus, tmp_path_factory):
    settings = settings_for(nats_server, tmp_path_factory.mktemp("data"))
    async with running_services(settings, bus):
        yield settings


async def test_one_message_gives_one_completed_turn(bus: Bus, services) -> None:
    outcome = await send_and_wait(bus, message_command("s-one", "hello there"), timeout=10)
    assert outcome.status == "completed", outcome
    assert "hello there" in (outcome.reply or "")
    stored = await bus.store.read_session("s-one")
    ended = [s.event for s in stored if isinstance(s.event, TurnEnded)]
    assert len(ended) == 1
    print([s.event.type for s in stored])
