"""A result over the size budget with the object store gone (issue 19, item 6): the call
fails with a clear reason, the executor goes on, and the next call still runs."""

from __future__ import annotations

from pathlib import Path

from tests.integration.conftest import running_services, settings_for
from tests.integration.test_redaction import Leaky
from tests.integration.test_tools_path import events_of, script
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.client import message_command, send_and_wait
from turnstream.core.events import ToolInvocationFailed, ToolInvocationSucceeded
from turnstream.tools import ToolRegistry


async def test_a_large_result_without_the_object_store_fails_with_a_reason(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path
) -> None:
    (tmp_path / "workspace").mkdir()
    calls = "{tool_calls: [{name: leak_big}]}"
    settings = settings_for(
        nats_server,
        tmp_path,
        script=script(tmp_path, calls, '{text: "got {last_tool_result:20}"}'),
        tool_result_budget=256,
    )
    tools = ToolRegistry.load(extra=[Leaky("leak_big", size=1000), Leaky("leak")])
    async with running_services(settings, bus, tools=tools):
        await bus.js.delete_object_store(bus.subjects.blobs_bucket)
        first = await send_and_wait(bus, message_command("noblob-1", "go"), timeout=20)
        second = await send_and_wait(bus, message_command("noblob-2", "go"), timeout=20)
    assert first.status == "completed" and second.status == "completed"
    for session in ("noblob-1", "noblob-2"):
        events = await events_of(bus, session)
        [failed] = [e for e in events if isinstance(e, ToolInvocationFailed)]
        assert not [e for e in events if isinstance(e, ToolInvocationSucceeded)]
        assert failed.data.error.kind == "result_not_stored"
        assert "over the budget of 256" in failed.data.error.detail
        assert settings.subjects.blobs_bucket in failed.data.error.detail
