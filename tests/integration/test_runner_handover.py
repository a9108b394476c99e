"""A runner that dies holding a delivered fact before it took the session's lease (so no
lease expiry announces the session): the fact comes back within the short ack wait, and a
live runner keeps what it is handling with in-progress acks."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import running_services, settings_for
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.scan import subject_counts
from turnstream.client import message_command, publish_command
from turnstream.runtime.mailbox import ACK_WAIT_S
from turnstream.turn_runner.app import DURABLE

pytestmark = pytest.mark.integration
SESSIONS = 10


async def test_facts_a_dead_runner_took_are_handled_within_the_ack_wait(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path
) -> None:
    script = tmp_path / "script.yaml"
    script.write_text('replies:\n  - text: "echo: {input}"\n')
    settings = settings_for(nats_server, tmp_path, script=script)
    swallowed: list[str] = []

    async def dead_runner(msg: Any) -> None:  # takes its share and never answers
        swallowed.append(msg.subject)

    async with running_services(settings, bus):
        # the dead runner joins the runner's deliver group: the server hands it some facts
        dead = await bus.nc.subscribe(bus.subjects.deliver(DURABLE), queue=DURABLE, cb=dead_runner)
        sessions = [f"handover-{n}" for n in range(SESSIONS)]
        started = time.monotonic()
        for session in sessions:
            await publish_command(bus, session, message_command(session, "hi"))
        await asyncio.sleep(0.5)
        await dead.unsubscribe()  # it died
        ended: set[str] = set()
        async with asyncio.timeout(30):  # the ack wait was 60 s
            while ended != set(sessions):
                counts = await subject_counts(
                    bus.nc, bus.subjects.log_stream, bus.subjects.log_kind("TurnEnded")
                )
                ended = {bus.subjects.session_from_log(s) for s in counts} & set(sessions)
                await asyncio.sleep(0.2)
        took = time.monotonic() - started
    assert swallowed, "the dead runner got no fact: the test tested nothing"
    assert took >= ACK_WAIT_S - 1  # the ones it took came back by redelivery
