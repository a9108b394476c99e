"""A tool turn through the real services on a real nats-server, running an MCP tool.

The executor connects to the MCP server from its settings and publishes the manifest; the
runner here is given the tools it learned from that manifest (`watch_tools`)."""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import running_services, settings_for
from tests.mcp.conftest import manifest_with, stdio_config
from turnstream.approval import app as approval
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.client import message_command, send_and_wait
from turnstream.core.events import ToolInvocationFailed, ToolInvocationSucceeded
from turnstream.core.turn import ToolInfo
from turnstream.gateway import app as gateway
from turnstream.runtime.manifest import watch_tools
from turnstream.settings import McpSettings, Settings
from turnstream.tool_executor import app as tool_executor
from turnstream.tools import ToolContext, ToolRegistry, ToolSpec
from turnstream.turn_runner import app as turn_runner

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


class Listed:
    """What the runner knows of a tool it learned from the manifest (it never runs it)."""

    def __init__(self, info: ToolInfo) -> None:
        self.spec = ToolSpec(**asdict(info))

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        raise AssertionError("the runner never runs tools")


async def test_an_mcp_tool_turn_through_the_executor(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path
) -> None:
    script = tmp_path / "script.yaml"
    script.write_text(
        "replies:\n"
        "  - {tool_calls: [{name: t__echo, arguments: {text: turnip}}]}\n"
        '  - {text: "the tool said: {last_tool_result:40}"}\n'
        "  - {tool_calls: [{name: t__fail, arguments: {why: bad}}]}\n"
        '  - {text: "it failed"}\n'
    )
    settings = Settings(
        nats_url=nats_server.url,
        data_dir=tmp_path,
        workspace=tmp_path / "workspace",
        security_mode="auto",
        script=script,
        mcp=McpSettings(servers={"t": stdio_config()}),
    )
    stop = asyncio.Event()
    manifests: list[tuple[tuple[ToolInfo, ...], str]] = []
    learned = asyncio.Event()

    def on_manifest(infos: tuple[ToolInfo, ...], digest: str) -> None:
        manifests.append((infos, digest))
        if any(i.name == "t__echo" for i in infos):
            learned.set()

    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(tool_executor.serve(settings, stop))
        tasks.create_task(watch_tools(bus, on_manifest, stop))
        try:
            await asyncio.wait_for(learned.wait(), 30)
            infos, digest = manifests[-1]
            assert digest.startswith("sha256:")
            echo = next(i for i in infos if i.name == "t__echo")
            assert echo.read_only and echo.parameters["properties"]["text"]["type"] == "string"
            assert "read_file" in {i.name for i in infos}  # the built-ins are in it too
            runner_tools = ToolRegistry([Listed(i) for i in infos])
            tasks.create_task(gateway.serve(settings, stop, tools=runner_tools))
            tasks.create_task(turn_runner.serve(settings, stop, tools=runner_tools))
            tasks.create_task(approval.serve(settings, stop))
            await asyncio.sleep(0.4)
            ok = await send_and_wait(bus, message_command("mcp1", "echo it"), timeout=30)
            assert ok.status == "completed", ok
            assert "echo: turnip" in (ok.reply or "")
            failed = await send_and_wait(bus, message_command("mcp1", "fail"), timeout=30)
            assert failed.status == "completed", failed
        finally:
            stop.set()
    events = [s.event for s in await bus.store.read_session("mcp1")]
    succeeded = [e for e in events if isinstance(e, ToolInvocationSucceeded)]
    assert len(succeeded) == 1
    failures = [e for e in events if isinstance(e, ToolInvocationFailed)]
    assert len(failures) == 1
    error = failures[0].data.error
    assert (error.error_class, error.kind) == ("tool_runtime_error", "mcp_tool_error")
    assert "failing on purpose: bad" in error.detail


async def test_the_runner_offers_what_the_executor_publishes(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path
) -> None:
    """Started as `up` starts it (no tools given), the runner learns the MCP tools from the
    executor's manifest: a turn calling one runs it instead of failing as an unknown tool."""
    script = tmp_path / "script.yaml"
    script.write_text(
        "replies:\n"
        "  - {tool_calls: [{name: t__echo, arguments: {text: parsnip}}]}\n"
        '  - {text: "the tool said: {last_tool_result:40}"}\n'
    )
    settings = settings_for(
        nats_server, tmp_path, script=script, mcp=McpSettings(servers={"t": stdio_config()})
    )
    async with running_services(settings, bus):
        await manifest_with(bus, "t__echo")
        await asyncio.sleep(0.5)  # the runner's watch hands it over
        done = await send_and_wait(bus, message_command("mcp2", "echo it"), timeout=30)
        assert done.status == "completed", done
        assert "echo: parsnip" in (done.reply or "")
