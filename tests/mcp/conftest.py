"""Real MCP servers (tests/mcp/server.py) as subprocesses: stdio, and streamable HTTP."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import bus, log_partitions, nats_server  # noqa: F401 (fixtures)
from turnstream.bus import Bus
from turnstream.bus.embedded import free_port
from turnstream.settings import McpHttpServer, McpStdioServer

SERVER = Path(__file__).with_name("server.py")


def stdio_config(**env: str) -> McpStdioServer:
    return McpStdioServer(command=sys.executable, args=[str(SERVER), "stdio"], env=env, timeout_s=5)


def start_http(port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the MCP HTTP test server did not start")


@pytest.fixture
def http_server() -> Iterator[tuple[McpHttpServer, int, list[subprocess.Popen[bytes]]]]:
    port = free_port()
    procs = [start_http(port)]
    config = McpHttpServer(
        url=f"http://127.0.0.1:{port}/mcp",
        headers={"Authorization": "Bearer ${secret:TEST_HTTP_TOKEN}"},
        timeout_s=5,
    )
    yield config, port, procs
    for proc in procs:
        proc.kill()
        proc.wait()


async def published(on: Bus) -> bytes:
    """The manifest the executors published, or nothing yet."""
    try:
        entry = await (await on.js.key_value("ts_tools")).get("manifest")
    except Exception:  # no bucket or no key yet
        return b""
    return entry.value or b""


async def manifest_with(on: Bus, name: str) -> dict[str, Any]:
    """The published manifest once it lists tool `name`."""
    for _ in range(150):  # the executor connects and publishes (30 s at most)
        raw = await published(on)
        if raw and name.encode() in raw:
            return dict(json.loads(raw))
        await asyncio.sleep(0.2)
    raise AssertionError(f"no manifest with {name}")
