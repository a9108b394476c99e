"""A workflow whose completion tool takes an MCP tool's name is refused at attach, by the
gateway of a deployment with that MCP server configured (real nats-server)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.integration.conftest import running_services, settings_for
from tests.mcp.conftest import stdio_config
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.client import attach_command, publish_command
from turnstream.core.events import Event, InputRejected, TurnEnded
from turnstream.settings import McpSettings

STAGE = """---
id: plan
name: Plan
allowedTools: []
completionTool: {tool}
completionSchema: {{type: object}}
retryPolicy: {{maxAttempts: 1}}
turnCap: 3
resolutionPolicy: fail
---
Plan it.
"""


async def test_a_completion_tool_in_an_mcp_servers_namespace_is_refused_at_attach(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path
) -> None:
    (tmp_path / "workspace").mkdir()
    flow = tmp_path / "flows" / "clash"
    flow.mkdir(parents=True)
    (flow / "workflow.yaml").write_text("name: clash\nsteps: [plan]\n")
    (flow / "plan.md").write_text(STAGE.format(tool="t__echo"))
    settings = settings_for(
        nats_server,
        tmp_path,
        workflows=tmp_path / "flows",
        mcp=McpSettings(servers={"t": stdio_config()}),
    )
    async with running_services(settings, bus):
        await publish_command(bus, "wf-clash", attach_command("wf-clash", "clash"))
        events = await _until_ended(bus, "wf-clash")
    (rejected,) = [e for e in events if isinstance(e, InputRejected)]
    assert rejected.data.kind == "workflow_invalid"
    assert any(
        "'t__echo' is in MCP server 't''s namespace (t__*)" in error
        for error in rejected.data.errors
    ), rejected.data.errors
    (ended,) = [e for e in events if isinstance(e, TurnEnded)]
    assert ended.data.failure_class == "invalid_input"


async def _until_ended(bus: Bus, session: str) -> list[Event]:
    async with asyncio.timeout(20):
        while True:
            events = [s.event for s in await bus.store.read_session(session)]
            if any(isinstance(e, TurnEnded) for e in events):
                return events
            await asyncio.sleep(0.1)
