"""The gateway's intake as a push consumer taking batches: keys claimed per batch, a key
used before dropped whatever the batch, the Nats-Msg-Id and the gateway's restarts; a pull
durable from an older version replaced without losing a command."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.js.errors import NotFoundError

from tests.integration.conftest import events_of, only, settings_for
from turnstream.bus import Bus
from turnstream.bus.consume import bind_push, durable_pull
from turnstream.bus.durables import GATEWAY, DurableMissing, ensure_durables
from turnstream.bus.embedded import EmbeddedServer
from turnstream.client import message_command, publish_command
from turnstream.core.events import InputAccepted, InputRejected, SessionConfigured, TurnEnded
from turnstream.gateway import app as gateway
from turnstream.gateway.dedup import claim_key

pytestmark = pytest.mark.integration


@contextlib.asynccontextmanager
async def a_gateway(server: EmbeddedServer, tmp: Path) -> AsyncIterator[None]:
    agents = tmp / "agents"
    agents.mkdir(exist_ok=True)
    for name in ("ana", "bea"):
        text = f"---\nname: {name}\ndescription: the {name} agent\n---\nYou are {name}.\n"
        (agents / f"{name}.md").write_text(text)
    stop = asyncio.Event()
    serving = asyncio.create_task(gateway.serve(settings_for(server, tmp, agents=agents), stop))
    await asyncio.sleep(0.4)
    try:
        yield
    finally:
        stop.set()
        await serving


async def accepted_in(bus: Bus, session: str, count: int) -> list[InputAccepted]:
    async with asyncio.timeout(10):
        while len(only(await events_of(bus, session), InputAccepted)) < count:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)  # a second one, were it coming
    return only(await events_of(bus, session), InputAccepted)


async def test_a_key_used_before_a_gateway_restart_is_dropped_after_it(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path
) -> None:
    command = message_command("gw-restart", "once", idempotency_key="gw-restart-key")
    async with a_gateway(nats_server, tmp_path):
        await publish_command(bus, "gw-restart", command)
        [first] = await accepted_in(bus, "gw-restart", 1)
    async with a_gateway(nats_server, tmp_path):  # a new process: nothing in memory
        # another Nats-Msg-Id: the inbound stream's dedup does not see it
        await publish_command(bus, "gw-restart", {**command, "text": "twice"}, "other-msg-id")
        await asyncio.sleep(1.0)
        assert await accepted_in(bus, "gw-restart", 1) == [first]


async def test_one_batch_with_a_key_twice_accepts_it_once_and_the_rest_all(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path
) -> None:
    session = "gw-batch"
    # published while no gateway runs: the next one is handed them all at once
    for n in range(5):
        await publish_command(
            bus, session, message_command(session, f"m{n}", idempotency_key=f"key-{n}")
        )
    again = message_command(session, "m2 again", idempotency_key="key-2")
    await publish_command(bus, session, again, "key-2-retried-under-another-msg-id")
    await publish_command(bus, session, b"not json", "bad-1")
    async with a_gateway(nats_server, tmp_path):
        accepted = await accepted_in(bus, session, 5)
        events = await events_of(bus, session)
    assert sorted(e.data.text for e in accepted) == [f"m{n}" for n in range(5)]
    assert len(only(events, InputRejected)) == 1  # a rejection claims nothing
    assert len(only(events, TurnEnded)) == 1
    kv = await bus.js.key_value(bus.subjects.idempotency_bucket)
    entry = await kv.get(claim_key(session, "key-2"))
    assert int(entry.value) == accepted[2].data.inbound_seq  # the first one claimed it


async def test_the_setup_step_puts_the_gateways_push_consumer_in_place_of_a_pull_one(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path
) -> None:
    subjects = bus.subjects
    with contextlib.suppress(NotFoundError):  # this module's gateways made it a push one
        await bus.js.delete_consumer(subjects.inbound_stream, gateway.DURABLE)
    # an older gateway's pull durable, with a command it took and acked, and one it did not
    older = await durable_pull(
        bus.js, subjects.inbound_stream, gateway.DURABLE, [subjects.inbound_all]
    )
    await publish_command(
        bus, "gw-old", message_command("gw-old", "done", idempotency_key="gw-old-1")
    )
    for msg in await older.fetch(10, timeout=5):
        await msg.ack()
    await older.unsubscribe()
    await publish_command(
        bus, "gw-old", message_command("gw-old", "waiting", idempotency_key="gw-old-2")
    )
    with pytest.raises(DurableMissing, match="streams apply"):  # a gateway cannot bind it
        await bind_push(bus.js, subjects, GATEWAY, subjects.inbound_stream, None, _ignore)
    await ensure_durables(bus.js, subjects, 10.0)  # the setup step
    async with a_gateway(nats_server, tmp_path):
        accepted = await accepted_in(bus, "gw-old", 1)
        info = await bus.js.consumer_info(subjects.inbound_stream, gateway.DURABLE)
    assert [e.data.text for e in accepted] == ["waiting"]  # not the acked one again
    assert info.config.deliver_subject == subjects.deliver(gateway.DURABLE)


async def test_a_backlog_beyond_what_is_in_hand_is_accepted_once_without_redeliveries(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path
) -> None:
    sessions = [f"gw-backlog-{n}" for n in range(10)]
    per_session = gateway.IN_HAND // len(sessions) + 20
    for n in range(per_session):
        for session in sessions:
            command = message_command(session, f"m{n}", idempotency_key=f"{session}-{n}")
            await publish_command(bus, session, command)
    async with a_gateway(nats_server, tmp_path):
        for session in sessions:
            assert len(await accepted_in(bus, session, per_session)) == per_session
        info = await bus.js.consumer_info(bus.subjects.inbound_stream, gateway.DURABLE)
    assert info.config.max_ack_pending == gateway.IN_HAND
    assert info.num_redelivered == 0 and info.num_ack_pending == 0


async def test_in_one_batch_a_sessions_agent_is_set_by_its_first_message_naming_one(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path
) -> None:
    session = "gw-agents"
    named = [("ana", "k1"), ("bea", "k2"), ("ana", "k3"), ("ana", "k1")]  # k1 again: dropped
    for n, (agent, key) in enumerate(named):
        command = message_command(session, f"m{n}", agent=agent, idempotency_key=key)
        await publish_command(bus, session, command, f"msg-{n}")
    async with a_gateway(nats_server, tmp_path):
        accepted = await accepted_in(bus, session, 2)
        events = await events_of(bus, session)
    assert [e.data.agent for e in only(events, SessionConfigured)] == ["ana"]
    assert [e.data.text for e in accepted] == ["m0", "m2"]
    [conflict] = only(events, InputRejected)
    assert conflict.data.kind == "agent_conflict" and conflict.data.idempotency_key == "k2"


async def _ignore(_msg: object) -> None:
    return None
