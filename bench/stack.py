"""The services as `turnstream up` runs them, for the benchmarks that need all of them."""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from turnstream.bus.embedded import EmbeddedServer
from turnstream.settings import Settings

try:
    from turnstream.cli.up import Supervisor
except ImportError:  # a baseline from before the cli/ package (bench/compare.py --base)
    from turnstream.up import Supervisor  # type: ignore[no-redef]
try:
    from turnstream.runtime import apply_streams
except ImportError:  # a baseline whose services made their streams themselves
    apply_streams = None  # type: ignore[assignment]

STARTUP_S = 1.5
"""Time the services get to connect and bind their consumers."""


def workspace(root: Path, security_mode: str) -> None:
    """A workspace with the `bench.txt` the one-tool scripts read, and the mode for it."""
    (root / "workspace").mkdir()
    (root / "workspace" / "bench.txt").write_text("x" * 1000)
    os.environ["TURNSTREAM_SECURITY_MODE"] = security_mode
    os.environ["TURNSTREAM_WORKSPACE"] = str(root / "workspace")


@contextmanager
def running(
    server: EmbeddedServer, root: Path, script: Path, console: Console
) -> Iterator[Supervisor]:
    """The setup step, then every service started against `server` with the scripted
    provider (as `turnstream up` does); stopped after."""
    settings = Settings(data_dir=root, script=script)
    if apply_streams is not None:
        asyncio.run(apply_streams(settings.model_copy(update={"nats_url": server.url})))
    supervisor = Supervisor(server.url, settings, console)
    supervisor.start_all()
    try:
        time.sleep(STARTUP_S)
        yield supervisor
    finally:
        supervisor.stop_all()


def pids(supervisor: Supervisor, server: EmbeddedServer) -> dict[str, int]:
    """Each service's process, the nats-server's and this one's (whose CPU to count)."""
    assert server.process is not None
    found = {name: child.pid for name, child in supervisor.children.items()}
    return found | {"nats-server": server.process.pid, "bench client": os.getpid()}


@dataclass
class Deployment:
    root: Path
    server: EmbeddedServer
    supervisor: Supervisor
    pids: dict[str, int]
    """Each service's process and the nats-server's (not this one's)."""


@contextmanager
def scripted(script_text: str, console: Console) -> Iterator[Deployment]:
    """A deployment of its own, as `turnstream up` starts it, in a temporary directory:
    approvals auto, the scripted provider playing `script_text`."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        workspace(root, "auto")
        script = root / "script.yaml"
        script.write_text(script_text)
        server = EmbeddedServer(root / "nats")
        server.start()
        try:
            with running(server, root, script, console) as supervisor:
                found = pids(supervisor, server)
                found.pop("bench client")
                yield Deployment(root, server, supervisor, found)
        finally:
            server.stop()
