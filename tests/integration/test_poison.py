"""Poison messages (issue 19, item 3): a message a service cannot decode is dead-lettered
and terminated at its first delivery, one whose handling fails every time after
`POISON_DELIVERIES`; the consumer goes on with the next."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.integration.conftest import running_services, settings_for
from tests.integration.test_event_store import ev
from tests.integration.test_tools_path import registry, script
from turnstream.bus import Bus
from turnstream.bus.consume import POISON_DELIVERIES, durable_push
from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.streams import dead_letter_stream
from turnstream.client import message_command, send_and_wait
from turnstream.core.events import encode


async def dead_letters(bus: Bus, consumer: str) -> list[Any]:
    stream = dead_letter_stream(bus.subjects.prefix)
    info = await bus.js.stream_info(stream)
    out = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        if seq == 0:
            break
        msg = await bus.js.get_msg(stream, seq)
        if msg.subject.endswith(f".{consumer}"):
            out.append(msg)
    return out


async def until_dead(bus: Bus, consumer: str, n: int, timeout: float = 30) -> list[Any]:
    async with asyncio.timeout(timeout):
        while True:
            found = await dead_letters(bus, consumer)
            if len(found) >= n:
                return found
            await asyncio.sleep(0.2)


async def test_undecodable_messages_are_dead_lettered_and_services_go_on(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path
) -> None:
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "notes.txt").write_text("fine\n")
    settings = settings_for(
        nats_server,
        tmp_path,
        script=script(
            tmp_path,
            "{tool_calls: [{name: read_file, arguments: {path: notes.txt}}]}",
            '{text: "read {last_tool_result:10}"}',
        ),
    )
    log = bus.subjects.log
    async with running_services(settings, bus, tools=registry()):
        await bus.js.publish(log("poison", "ToolInvocationRequested"), b"{not json")
        await bus.js.publish(log("poison", "InputAccepted"), b'{"type": "InputAccepted"}')
        executor = await until_dead(bus, "tool-executor", 1)
        runner = await until_dead(bus, "turn-runner", 1)
        outcome = await send_and_wait(bus, message_command("after-poison", "go"), timeout=20)
        await asyncio.sleep(1)
    assert outcome.status == "completed" and "read fine" in (outcome.reply or "")
    assert executor[0].data == b"{not json" and runner[0].data == b'{"type": "InputAccepted"}'
    for dead in executor + runner:
        assert dead.headers["Ts-Dead-Reason"] == "undecodable"
        assert dead.headers["Ts-Dead-Stream"] == bus.subjects.log_stream
    assert len(await dead_letters(bus, "tool-executor")) == 1  # not again: it was terminated
    for durable in ("tool-executor", "turn-runner"):
        info = await bus.js.consumer_info(bus.subjects.log_stream, durable)
        assert info.num_ack_pending == 0 and info.num_redelivered == 0, info


async def test_a_message_failing_every_delivery_is_dead_lettered_after_a_bound(
    bus: Bus,
) -> None:
    subjects = bus.subjects
    durable = "poison-test"
    seen: list[int] = []

    async def on_msg(msg: Any) -> None:
        seen.append(msg.metadata.sequence.stream)
        if msg.headers and msg.headers.get("poison"):
            raise RuntimeError("this one always fails")
        await msg.ack()

    good = ev("poison-bound")
    await bus.js.publish(subjects.log("poison-bound", "X"), encode(good), headers={"poison": "1"})
    await bus.js.publish(subjects.log("poison-bound", "Y"), encode(ev("poison-bound")))
    sub = await durable_push(
        bus.js,
        subjects.log_stream,
        durable,
        subjects.deliver(durable),
        [subjects.log("poison-bound", "*")],
        on_msg,
        ack_wait_s=0.5,
    )
    try:
        [dead] = await until_dead(bus, durable, 1, timeout=30)
        await asyncio.sleep(1.5)  # terminated: no further delivery
    finally:
        await sub.unsubscribe()
    assert dead.headers["Ts-Dead-Reason"] == f"failed {POISON_DELIVERIES} deliveries"
    assert "this one always fails" in dead.headers["Ts-Dead-Error"]
    assert len(seen) == POISON_DELIVERIES + 1
