"""An idle session costs a runner nothing (issue 42): after many one-turn sessions, once
their turns have ended, the runner holds no actor, no lease and no in-progress message of
theirs; what it remembers per session seen is capped."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.integration.conftest import running_services, settings_for
from tests.integration.test_tools_path import script
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.leases import KNOWN_FREED
from turnstream.client import message_command, publish_command
from turnstream.turn_runner import app
from turnstream.turn_runner.app import KNOWN_PATTERNS, Runner

pytestmark = pytest.mark.integration
SESSIONS = 200


async def test_many_one_turn_sessions_leave_no_actor_and_no_lease(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "workspace").mkdir()
    runners: list[Runner] = []
    serve = Runner.serve

    async def recorded(self: Runner, stop: asyncio.Event) -> None:
        runners.append(self)
        await serve(self, stop)

    monkeypatch.setattr(app.Runner, "serve", recorded)
    settings = settings_for(
        nats_server,
        tmp_path,
        script=script(tmp_path, '{text: "noted"}'),
        lease_ttl_s=2,
        lease_renew_s=0.2,
    )
    ended: set[str] = set()
    all_ended = asyncio.Event()

    async def on_end(msg: Any) -> None:
        ended.add(orjson.loads(msg.data)["sessionId"])
        if len(ended) == SESSIONS:
            all_ended.set()

    sub = await bus.nc.subscribe(bus.subjects.log_kind_live("TurnEnded"), cb=on_end)
    try:
        async with running_services(settings):
            sessions = [f"idle-{n}" for n in range(SESSIONS)]
            await asyncio.gather(
                *(publish_command(bus, s, message_command(s, "hello")) for s in sessions)
            )
            async with asyncio.timeout(60):
                await all_ended.wait()
            (runner,) = runners
            assert len(runner.mailboxes.boxes) > 0  # the actors were there for the turns
            # their leases are released within a renewal round or two, the actors with them, and
            # each actor's worker ends when it next runs
            async with asyncio.timeout(30):
                while (  # noqa: ASYNC110
                    runner.leases.held or runner.mailboxes.boxes or runner.mailboxes.workers
                ):
                    await asyncio.sleep(0.05)
            mailboxes = runner.mailboxes
            assert not mailboxes.rested and not mailboxes.workers and not len(mailboxes.kept)
            assert len(runner.leases.freed) <= min(SESSIONS, KNOWN_FREED)
            assert len(runner.session_patterns) <= KNOWN_PATTERNS
    finally:
        await sub.unsubscribe()
    assert ended == set(sessions)
