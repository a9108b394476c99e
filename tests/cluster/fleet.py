"""Service instances as real processes on the 3-node cluster, added and removed at will.

Each instance is `python -m tests.recovery.procs <service>` (the real service with the
`count_run` tools that write each invocation id to a workspace file, so a side effect
run twice shows) or `python -m turnstream.audit`, connected as its service's user of the
shipped `ops/accounts.conf` to all three nodes. A turn-runner gets a stable
`TURNSTREAM_RUNNER_ID` (its instance name), so a lease's value names the process.
Used by `tests/cluster/test_elastic.py` and `bench/scale.py` part 2.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.cluster.conftest import Cluster

ROOT = Path(__file__).parents[2]
SERVICES = ("gateway", "turn_runner", "approval", "tool_executor")
"""The services that scale by adding instances (the audit, whose instances share the
log's partitions, is started and stopped apart)."""
USER = {
    "gateway": "gateway",
    "turn_runner": "turn-runner",
    "approval": "approval",
    "tool_executor": "tool-executor",
    "audit": "audit",
}
READY = {
    "gateway": "gateway consuming",
    "turn_runner": " consuming ",
    "approval": " consuming ",
    "tool_executor": "tool-executor running",
    "audit": "audit caught up",
}
"""What each service logs once it serves."""
COMMAND = {
    **{s: [sys.executable, "-m", "tests.recovery.procs", s] for s in SERVICES},
    "audit": [sys.executable, "-m", "turnstream.audit"],
}


class Fleet:
    """The instances started so far, by name (`turn_runner-2`); logs in `root/logs`."""

    def __init__(self, cluster: Cluster, root: Path, script: str, **env: str) -> None:
        self.cluster, self.root = cluster, root
        self.workspace = root / "workspace"
        self.workspace.mkdir(exist_ok=True)
        (root / "logs").mkdir(exist_ok=True)
        (root / "script.yaml").write_text(script)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTREAM_")}
        if level := os.environ.get("TS_TEST_LOG_LEVEL"):  # DEBUG: each fact's ack, each lease
            self.env["TURNSTREAM_LOG_LEVEL"] = level  # (tests/conftest.py drops TURNSTREAM_*)
        self.env.update(
            PYTHONPATH=str(ROOT),
            TURNSTREAM_REPLICAS="3",
            TURNSTREAM_DATA_DIR=str(root),
            TURNSTREAM_WORKSPACE=str(self.workspace),
            TURNSTREAM_SCRIPT=str(root / "script.yaml"),
            TURNSTREAM_PROVIDER="scripted",
            TURNSTREAM_CONFIG=str(root / "absent.yaml"),
            **env,
        )
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.started: dict[str, int] = {}

    def start(self, service: str, name: str | None = None) -> str:
        """A new instance of `service` (or one under an old `name`: a restart); its name."""
        if name is None:
            self.started[service] = self.started.get(service, 0) + 1
            name = f"{service}-{self.started[service]}"
        env = {**self.env, "TURNSTREAM_NATS_URL": self.cluster.url(USER[service])}
        if service == "turn_runner":
            env["TURNSTREAM_RUNNER_ID"] = name
        with open(self.log_path(name), "ab") as log:
            self.procs[name] = subprocess.Popen(
                COMMAND[service], env=env, stdout=log, stderr=log, cwd=ROOT
            )
        return name

    def log_path(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    async def ready(self, name: str, timeout: float = 90) -> None:
        """Until instance `name` says it serves (a dead one fails with its log)."""
        service = name.rsplit("-", 1)[0]
        path = self.log_path(name)
        async with asyncio.timeout(timeout):
            while not (path.exists() and READY[service] in path.read_text()):
                if self.procs[name].poll() is not None:
                    raise AssertionError(f"{name} exited:\n{path.read_text()}")
                await asyncio.sleep(0.1)

    def alive(self, service: str) -> list[str]:
        """The names of `service`'s instances still running."""
        return [
            name
            for name, proc in self.procs.items()
            if name.rsplit("-", 1)[0] == service and proc.poll() is None
        ]

    def pid(self, name: str) -> int:
        return self.procs[name].pid

    def by_pid(self, pid: int) -> str | None:
        return next((n for n, p in self.procs.items() if p.pid == pid), None)

    async def term(self, name: str, timeout: float = 30) -> int:
        """SIGTERM: the instance drains and hands over; its exit code. Waited for in a
        thread: a blocked event loop would starve the caller's own connections."""
        proc = self.procs[name]
        proc.send_signal(signal.SIGTERM)
        return await asyncio.to_thread(proc.wait, timeout)

    def kill(self, name: str) -> None:
        """SIGKILL: nothing handed over."""
        proc = self.procs[name]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def runs(self, file: str) -> list[str]:
        """The invocation ids `count_run` wrote to `file`, one per run."""
        path = self.workspace / file
        return path.read_text().splitlines() if path.exists() else []
