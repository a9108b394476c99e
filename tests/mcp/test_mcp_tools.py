"""MCP tools against real SDK servers: a subprocess over stdio, one over streamable HTTP."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.mcp.conftest import start_http, stdio_config
from turnstream.settings import McpHttpServer, McpStdioServer, Settings
from turnstream.tools import ToolContext, ToolError, ToolRegistry, builtin_tools
from turnstream.tools.manifest import manifest
from turnstream.tools.mcp import McpServer, McpTools

pytestmark = pytest.mark.timeout(60)

SECRETS = {"TEST_TOKEN": "s3cret-value", "TEST_HTTP_TOKEN": "http-s3cret"}


def secret(name: str) -> str | None:
    return SECRETS.get(name)


def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(tmp_path, "s1", "inv1")


async def test_stdio_tools_are_listed_with_names_schemas_and_hints(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    async with McpTools({"t": stdio_config()}, secret) as mcp:
        specs = {t.spec.name: t.spec for t in mcp.tools()}
    assert {"t__echo", "t__write_note", "t__fail", "t__grow"} <= set(specs)
    echo = specs["t__echo"]
    assert echo.description == "Echo the text back."
    assert echo.parameters["type"] == "object"
    assert echo.parameters["properties"]["text"]["type"] == "string"
    assert echo.parameters["required"] == ["text"]
    assert (echo.read_only, echo.idempotent) == (True, True)
    note = specs["t__write_note"]
    assert (note.read_only, note.idempotent) == (False, True)  # mutating: goes to approval
    assert (specs["t__grow"].read_only, specs["t__grow"].idempotent) == (False, False)
    # the bad schema is skipped with an error naming the server and the tool
    assert "t__broken" not in specs
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any(
        "MCP server 't': tool 'broken' skipped: its inputSchema is not valid JSON Schema" in m
        for m in errors
    ), errors


async def test_stdio_call_error_secret_env_and_registry(tmp_path: Path) -> None:
    async with McpTools({"t": stdio_config(TEST_TOKEN="${secret:TEST_TOKEN}")}, secret) as mcp:
        registry = mcp.registry(ToolRegistry(builtin_tools()))
        echo = registry.get("t__echo")
        assert echo is not None
        assert await echo.run({"text": "hello"}, ctx(tmp_path)) == "echo: hello"
        assert registry.validate_args("t__echo", {"text": 3})  # the MCP schema validates args
        fail = registry.get("t__fail")
        assert fail is not None
        with pytest.raises(ToolError) as err:
            await fail.run({"why": "testing"}, ctx(tmp_path))
        assert err.value.kind == "mcp_tool_error"
        assert "failing on purpose: testing" in err.value.detail
        env_tool = registry.get("t__secret_env")
        assert env_tool is not None
        assert await env_tool.run({}, ctx(tmp_path)) == "s3cret-value"
        assert "read_file" in registry.names()  # the built-ins stay


async def test_killed_server_gives_tool_error_then_reconnects(tmp_path: Path) -> None:
    server = McpServer("t", stdio_config(), secret)
    await server.connect()
    try:
        first = int(await server.call("pid", {}))
        os.kill(first, signal.SIGKILL)
        with pytest.raises(ToolError) as err:
            await server.call("echo", {"text": "x"})
        assert err.value.kind in ("mcp_connection_lost", "mcp_timeout")
        assert "MCP server 't' tool 'echo'" in err.value.detail
        second = int(await server.call("pid", {}))
        assert second != first
        assert await server.call("echo", {"text": "back"}) == "echo: back"
    finally:
        await server.close()


async def test_hung_server_times_out_with_reason_and_reconnects() -> None:
    config = stdio_config()
    config.timeout_s = 1
    server = McpServer("t", config, secret)
    await server.connect()
    try:
        with pytest.raises(ToolError) as err:
            await server.call("sleep", {"seconds": 10})
        assert err.value.kind == "mcp_timeout"
        assert "no answer within 1 s" in err.value.detail
        assert await server.call("echo", {"text": "again"}) == "echo: again"
    finally:
        await server.close()


async def test_list_changed_refreshes_the_tools_and_the_manifest() -> None:
    async with McpTools({"t": stdio_config()}, secret) as mcp:
        base = ToolRegistry(builtin_tools())
        digests = [manifest(mcp.registry(base))["digest"]]
        changed = asyncio.Event()

        async def on_change() -> None:
            digests.append(manifest(mcp.registry(base))["digest"])
            changed.set()

        mcp.listeners.append(on_change)
        assert "t__extra" not in {t.spec.name for t in mcp.tools()}
        assert await mcp.servers[0].call("grow", {}) == "grown"
        await asyncio.wait_for(changed.wait(), 10)
        assert "t__extra" in {t.spec.name for t in mcp.tools()}
        assert digests[0] != digests[1]


async def test_a_server_that_does_not_start_is_logged_and_others_go_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    servers: dict[str, McpStdioServer | McpHttpServer] = {
        "good": stdio_config(),
        "nope": McpStdioServer(command="/nonexistent/mcp-server", timeout_s=5),
        "nokey": stdio_config(TEST_TOKEN="${secret:MISSING_ONE}"),
    }
    async with McpTools(servers, secret) as mcp:
        names = {t.spec.name for t in mcp.tools()}
    assert "good__echo" in names
    assert not any(n.startswith(("nope__", "nokey__")) for n in names)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("MCP server 'nope' did not start" in m for m in errors), errors
    assert any(
        "MCP server 'nokey' did not start" in m and "${secret:MISSING_ONE} is not set" in m
        for m in errors
    ), errors


async def test_secret_values_are_never_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    config = stdio_config(TEST_TOKEN="${secret:TEST_TOKEN}")
    async with McpTools({"t": config}, secret) as mcp:
        tool = next(t for t in mcp.tools() if t.spec.name == "t__secret_env")
        await tool.run({}, ToolContext(Path("."), "s", "i"))
    assert "s3cret-value" not in caplog.text


def test_settings_read_mcp_servers_from_yaml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "turnstream.yaml"
    config.write_text(
        "mcp:\n  servers:\n"
        "    files: {command: npx, args: [-y, some-server], env: {TOKEN: '${secret:T}'}}\n"
        "    remote: {url: 'http://127.0.0.1:1/mcp', headers: {Authorization: 'Bearer x'}}\n"
    )
    monkeypatch.setenv("TURNSTREAM_CONFIG", str(config))
    servers = Settings().mcp.servers
    assert isinstance(servers["files"], McpStdioServer)
    assert servers["files"].args == ["-y", "some-server"]
    assert isinstance(servers["remote"], McpHttpServer)
    assert servers["remote"].headers == {"Authorization": "Bearer x"}


async def test_http_tools_call_error_and_restart(
    http_server: tuple[McpHttpServer, int, list[subprocess.Popen[bytes]]], tmp_path: Path
) -> None:
    config, port, procs = http_server
    async with McpTools({"web": config}, secret) as mcp:
        specs = {t.spec.name: t.spec for t in mcp.tools()}
        assert specs["web__echo"].read_only and not specs["web__write_note"].read_only
        assert "web__broken" not in specs
        server = mcp.servers[0]
        assert await server.call("echo", {"text": "over http"}) == "echo: over http"
        with pytest.raises(ToolError) as err:
            await server.call("fail", {"why": "http"})
        assert err.value.kind == "mcp_tool_error"
        # the server dies: a clear error, then a restarted server is reached again
        procs[0].kill()
        procs[0].wait()
        with pytest.raises(ToolError) as err:
            await server.call("echo", {"text": "gone"})
        assert "MCP server 'web' tool 'echo'" in err.value.detail
        procs.append(await asyncio.to_thread(start_http, port))
        assert await server.call("echo", {"text": "again"}) == "echo: again"
