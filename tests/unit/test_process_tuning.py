"""What a service process and the embedded nats-server run on (docs/performance.md says
what each choice was measured to save)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from turnstream.bus.embedded import EmbeddedServer
from turnstream.runtime.process import loop_factory


@pytest.mark.skipif(sys.platform == "win32", reason="uvloop is not installed on Windows")
def test_a_service_runs_on_uvloop() -> None:
    import uvloop

    factory = loop_factory()
    assert factory is uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        assert isinstance(runner.get_loop(), uvloop.Loop)


def test_the_embedded_server_runs_one_go_thread_unless_the_operator_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GOMAXPROCS", raising=False)
    server = EmbeddedServer(tmp_path)
    assert server.environment()["GOMAXPROCS"] == "1"
    monkeypatch.setenv("GOMAXPROCS", "4")
    assert server.environment()["GOMAXPROCS"] == "4"
    assert server.environment()["PATH"] == os.environ["PATH"]


def test_a_service_process_starts_its_loop_on_uvloop(tmp_path: Path) -> None:
    code = (
        "import asyncio, sys\n"
        "from turnstream.runtime.process import run_service\n"
        "async def serve(settings, stop, bus=None):\n"
        "    print(type(asyncio.get_running_loop()).__module__)\n"
        "run_service('probe', serve)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith("uvloop"), result.stdout
