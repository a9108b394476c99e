"""Each model request records the tool list it offered (`toolsDigest`, `tools` on
ProviderRequestStarted): the executor's published manifest, and a new one after an MCP
server's `notifications/tools/list_changed`. Real MCP server, real nats-server, every
service started as `up` starts them (the runner follows the manifest)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.integration.conftest import running_services, settings_for
from tests.mcp.conftest import manifest_with, stdio_config
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.client import message_command, send_and_wait
from turnstream.core.events import ProviderRequestStarted
from turnstream.core.turn.manifest import tools_digest
from turnstream.core.turn.runtime_tools import RUNTIME_TOOLS
from turnstream.settings import McpSettings
from turnstream.tools.manifest import infos

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


async def test_each_request_records_the_manifest_it_offered(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path
) -> None:
    script = tmp_path / "script.yaml"
    script.write_text(
        "replies:\n"
        "  - {tool_calls: [{name: t__grow, arguments: {}}]}\n"
        '  - {text: "grown"}\n'
        '  - {text: "now with more tools"}\n'
    )
    settings = settings_for(
        nats_server, tmp_path, script=script, mcp=McpSettings(servers={"t": stdio_config()})
    )
    async with running_services(settings, bus):
        before = await manifest_with(bus, "t__grow")
        await asyncio.sleep(0.5)  # the runner's watch hands it over
        grown = await send_and_wait(bus, message_command("mf1", "grow"), timeout=30)
        assert grown.status == "completed", grown
        after = await manifest_with(bus, "t__extra")
        await asyncio.sleep(0.5)
        more = await send_and_wait(bus, message_command("mf1", "again"), timeout=30)
        assert more.status == "completed", more
    events = [s.event for s in await bus.store.read_session("mf1")]
    started = [e.data for e in events if isinstance(e, ProviderRequestStarted)]
    assert len(started) == 3
    # what the model saw: the published manifest, and the runtime's own tools beside it
    runtime = tuple(RUNTIME_TOOLS.values())
    assert started[0].tools_digest == tools_digest((*infos(before), *runtime))
    assert started[-1].tools_digest == tools_digest((*infos(after), *runtime))
    assert started[-1].tools_digest != started[0].tools_digest
    assert "t__extra" not in (started[0].tools or []) and "t__extra" in (started[-1].tools or [])
    assert started[0].tools == [t.name for t in (*infos(before), *runtime)]
