"""A turn-runner killed holding a fact it had not acked (a session's input accepted, its
turn not started: no open turn for `wake_open` to find), restarted at once under the same
TURNSTREAM_RUNNER_ID: it takes its sessions (or partitions) back and the turn goes on
from the log without waiting for the consumer to redeliver the fact (`ACK_WAIT_S`), on a
log of one stream and of four partitions."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from tests.recovery.harness import check_invariants, deployment, wait_for
from tests.recovery.test_two_runners import SCRIPT
from turnstream.bus import Bus
from turnstream.client import message_command, publish_command
from turnstream.turn_runner.app import DURABLE

pytestmark = pytest.mark.e2e


async def delivered_unacked(bus: Bus, stream: str) -> None:
    """Until the runner's consumer has delivered a fact that is not acked."""
    async with asyncio.timeout(30):
        while True:
            if (await bus.js.consumer_info(stream, DURABLE)).num_ack_pending:
                return
            await asyncio.sleep(0.05)


@pytest.mark.parametrize("partitions", [1, 4])
async def test_a_restarted_runner_goes_on_with_the_fact_it_died_holding(
    tmp_path: Path, partitions: int
) -> None:
    async with deployment(
        tmp_path,
        SCRIPT,
        log_partitions=partitions,
        TURNSTREAM_RUNNER_ID="runner-a",
        TURNSTREAM_LEASE_TTL_S="30",
        TURNSTREAM_LEASE_RENEW_S="3",
    ) as (d, bus):
        session = "restart-1"
        stream = bus.subjects.log_stream_of(session)
        await publish_command(bus, session, message_command(session, "first"))
        await wait_for(bus, session, "TurnEnded")

        d.signal("turn_runner", signal.SIGSTOP)  # it receives the next fact, never handles it
        await publish_command(bus, session, message_command(session, "second"))
        await wait_for(bus, session, "InputAccepted", count=2)
        await delivered_unacked(bus, stream)
        d.kill9("turn_runner")
        d.start("turn_runner")

        await wait_for(bus, session, "TurnEnded", count=2)
        # the fact the killed runner held is still unacked: its redelivery (ACK_WAIT_S after
        # it was delivered) is still to come, and the turn has ended, from the log
        consumer = await bus.js.consumer_info(stream, DURABLE)
        assert consumer.num_ack_pending == 1, consumer
        log = await check_invariants(bus, session)
        assert [e.data.status for e in log if e.type == "TurnEnded"] == ["completed"] * 2
        assert len(d.runs("runs.txt")) == 2
