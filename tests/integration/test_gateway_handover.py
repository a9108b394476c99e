"""A gateway that dies holding a command: the next one accepts it after a short ack wait,
not after the 30 s a sender used to wait; a live gateway keeps a slow batch its own."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import settings_for
from turnstream.bus import Bus
from turnstream.bus.consume import durable_push, kept_in_progress
from turnstream.bus.embedded import EmbeddedServer
from turnstream.client import message_command, publish_command
from turnstream.core.events import InputAccepted
from turnstream.gateway import app as gateway

pytestmark = pytest.mark.integration


async def test_a_command_held_by_a_dead_gateway_is_accepted_within_its_short_ack_wait(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path
) -> None:
    subjects = bus.subjects
    # the dying gateway: in the shared durable's deliver group, it takes the command and
    # never acks
    held: asyncio.Queue[Any] = asyncio.Queue()
    dying = await durable_push(
        bus.js,
        subjects.inbound_stream,
        gateway.DURABLE,
        subjects.deliver(gateway.DURABLE),
        [subjects.inbound_all],
        held.put,
        ack_wait_s=gateway.ACK_WAIT_S,
    )
    await publish_command(bus, "handover-1", message_command("handover-1", "hello"))
    async with asyncio.timeout(5):
        await held.get()
    taken_at = time.monotonic()
    await dying.unsubscribe()  # it dies holding the command

    stop = asyncio.Event()
    serving = asyncio.create_task(gateway.serve(settings_for(nats_server, tmp_path), stop))
    try:
        async with asyncio.timeout(15):  # it was 30 s: a sender gave up before
            while not any(  # noqa: ASYNC110 (polls the log)
                isinstance(s.event, InputAccepted)
                for s in await bus.store.read_session("handover-1")
            ):
                await asyncio.sleep(0.2)
        waited = time.monotonic() - taken_at
    finally:
        stop.set()
        await serving
    assert waited >= gateway.ACK_WAIT_S - 1  # redelivered by the server, not fetched twice


class Msg:
    def __init__(self) -> None:
        self.beats = 0

    async def in_progress(self) -> None:
        self.beats += 1


async def test_a_slow_batch_is_kept_with_in_progress_acks() -> None:
    msgs: list[Any] = [Msg(), Msg()]
    with kept_in_progress(msgs, ack_wait_s=0.3):
        await asyncio.sleep(0.55)  # past the ack wait: two beats of 0.1 s at least
    beats = [m.beats for m in msgs]
    await asyncio.sleep(0.3)
    assert beats[0] >= 2 and beats[0] == beats[1]
    assert [m.beats for m in msgs] == beats  # none after the block
