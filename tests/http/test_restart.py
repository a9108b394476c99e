"""The HTTP process as `turnstream up` runs it (`python -m turnstream.http`): killed -9
mid-stream and restarted, a client resumes with `Last-Event-ID` and loses nothing; on
SIGTERM open streams end at once and the process exits cleanly; a non-loopback address
without keys is refused."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from tests.http.sse_client import Sse, read_sse
from tests.http.test_sse import marker
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer, free_port

pytestmark = pytest.mark.integration


def env_for(server: EmbeddedServer, addr: str, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTREAM_")}
    env.update(
        TURNSTREAM_NATS_URL=server.url,
        TURNSTREAM_HTTP_ADDR=addr,
        TURNSTREAM_CONFIG=os.devnull + ".absent.yaml",
        **more,
    )
    return env


@contextmanager
def http_process(env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "turnstream.http"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


async def until_up(url: str) -> None:
    async with httpx.AsyncClient(base_url=url) as client:
        for _ in range(150):
            try:
                if (await client.get("/readyz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError(f"{url} did not come up")


async def read_stream(url: str, session: str, n: int, last_id: str | None) -> list[Sse]:
    """The first `n` events with an id (or until the stream ends)."""
    out: list[Sse] = []
    headers = {"Last-Event-ID": last_id} if last_id else {}
    async with httpx.AsyncClient(base_url=url, timeout=15) as client:
        async with client.stream(
            "GET", f"/v1/sessions/{session}/stream", headers=headers
        ) as response:
            async for sse in read_sse(response):
                out.append(sse)
                if len([e for e in out if e.id]) >= n:
                    break
    return out


async def test_killed_mid_stream_and_restarted_nothing_is_lost(
    nats_server: EmbeddedServer, bus: Bus
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = env_for(nats_server, f"127.0.0.1:{port}")
    await bus.store.append_facts([marker("restart", n) for n in range(5)])
    seen: list[int] = []
    with http_process(env) as first:
        await until_up(url)
        async with httpx.AsyncClient(base_url=url, timeout=15) as client:
            async with client.stream("GET", "/v1/sessions/restart/stream") as response:
                async for sse in read_sse(response):
                    if sse.id:
                        seen.append(int(sse.id))
                    if len(seen) == 3:
                        first.send_signal(signal.SIGKILL)  # mid-stream, mid-replay
                        break
    await bus.store.append_facts([marker("restart", n) for n in range(5, 12)])
    with http_process(env):
        await until_up(url)
        rest = await read_stream(url, "restart", 12 - len(seen), str(seen[-1]))
    seen += [int(e.id) for e in rest if e.id]
    assert seen == [s.seq for s in await bus.store.read_session("restart")]


async def test_sigterm_ends_open_streams_and_exits_cleanly(nats_server: EmbeddedServer) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with http_process(env_for(nats_server, f"127.0.0.1:{port}")) as proc:
        await until_up(url)
        got: list[Sse] = []
        opened = asyncio.Event()

        async def follow() -> None:
            async with httpx.AsyncClient(base_url=url, timeout=15) as client:
                async with client.stream("GET", "/v1/sessions/quiet/stream") as response:
                    async for sse in read_sse(response, opened):
                        got.append(sse)

        task = asyncio.create_task(follow())
        await asyncio.wait_for(opened.wait(), 15)
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(task, 4)  # the stream ends, not at a 5 s graceful timeout
        assert await asyncio.to_thread(proc.wait, 10) == 0
    assert any("closed" in c for e in got for c in e.comments)


def test_a_public_address_without_keys_is_refused(nats_server: EmbeddedServer) -> None:
    env = env_for(nats_server, "0.0.0.0:0")
    done = subprocess.run(
        [sys.executable, "-m", "turnstream.http"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 3  # CANNOT_SERVE: `turnstream up` does not restart it
    assert "refusing to serve on 0.0.0.0 without API keys" in done.stdout + done.stderr
