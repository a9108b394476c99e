"""An answer whose prompt the gateway's read does not show yet (on a cluster, the client may
have read the prompt from a replica that applied it first) is looked for again before it is
rejected: a prompt stored within `ANSWER_RECHECKS_S` gets its answer."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from tests.integration.conftest import settings_for
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.client import answer_command, publish_command
from turnstream.gateway import app as gateway

pytestmark = pytest.mark.integration


def prompt(session: str, interaction_id: str) -> bytes:
    return orjson.dumps(
        {
            "id": f"ev-{interaction_id}",
            "type": "InteractionRequested",
            "time": "2026-11-26T03:32:23.916939Z",
            "sessionId": session,
            "chatId": session,
            "turnId": "turn-1",
            "traceId": "trace-1",
            "correlationId": "k-1",
            "causationId": "proposal-1",
            "source": "approval/test",
            "schemaVersion": 2,
            "data": {
                "interactionId": interaction_id,
                "invocationId": "inv-1",
                "tool": "count_run",
                "args": {"file": "asked.txt"},
                "deadline": "2026-11-26T03:37:23.916939Z",
                "prompt": "allow count_run(file='asked.txt')?",
                "kind": "tool",
            },
        }
    )


async def test_an_answer_to_a_prompt_stored_just_after_it_is_read_is_accepted(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path
) -> None:
    session, interaction = "late-prompt", "late-1"
    stop = asyncio.Event()
    serving = asyncio.create_task(gateway.serve(settings_for(nats_server, tmp_path), stop))
    try:
        await asyncio.sleep(1.0)  # the gateway consumes
        await publish_command(bus, session, answer_command(session, interaction, "approve"))
        await asyncio.sleep(0.3)  # the first read has missed it (the first recheck: 0.25 s)
        await bus.js.publish(
            bus.subjects.log(session, "InteractionRequested"), prompt(session, interaction)
        )
        async with asyncio.timeout(15):
            while not (  # noqa: ASYNC110 (polls the log)
                kinds := [
                    s.event.type
                    for s in await bus.store.read_session(session)
                    if s.event.type in ("InteractionAnswered", "InputRejected")
                ]
            ):
                await asyncio.sleep(0.1)
    finally:
        stop.set()
        await serving
    assert kinds == ["InteractionAnswered"]
