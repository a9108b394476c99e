"""A deployment of real service processes for crash tests, and the invariants they check.

Each service runs as `python -m tests.recovery.procs <service>`: the real service with two
extra tools that count their runs in a file (so a side effect run twice shows), on an
embedded nats-server whose store survives a restart of the server.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson

from turnstream.bus import Bus, connect
from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.errors import NoResponders
from turnstream.bus.streams import StreamLimits
from turnstream.client import live_state
from turnstream.core.events import Event
from turnstream.core.session import SessionState, fold, state_from_json
from turnstream.core.subjects import Subjects

ROOT = Path(__file__).parents[2]
SERVICES = ("gateway", "turn_runner", "approval", "tool_executor")
FAST_LEASES = {"TURNSTREAM_LEASE_TTL_S": "2", "TURNSTREAM_LEASE_RENEW_S": "0.5"}


class Deployment:
    def __init__(self, root: Path, server: EmbeddedServer, script: str, **env: str) -> None:
        self.root, self.server = root, server
        (root / "workspace").mkdir(exist_ok=True)
        (root / "script.yaml").write_text(script)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTREAM_")}
        self.env.update(
            PYTHONPATH=str(ROOT),
            TURNSTREAM_NATS_URL=server.url,
            TURNSTREAM_DATA_DIR=str(root),
            TURNSTREAM_WORKSPACE=str(root / "workspace"),
            TURNSTREAM_SCRIPT=str(root / "script.yaml"),
            TURNSTREAM_SECURITY_MODE="auto",
            TURNSTREAM_CONFIG=str(root / "absent.yaml"),
            TURNSTREAM_LOG_PARTITIONS=str(server.subjects.log_partitions),
            **FAST_LEASES,
        )
        self.env.update(env)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, *, as_name: str | None = None, **env: str) -> None:
        """Start service `name` (a second instance under another `as_name`)."""
        key = as_name or name
        with open(self.root / f"{key}.log", "ab") as log:
            self.procs[key] = subprocess.Popen(
                [sys.executable, "-m", "tests.recovery.procs", name],
                env={**self.env, **env},
                stdout=log,
                stderr=log,
                cwd=ROOT,
            )

    async def ready(self, name: str, marker: str = "consuming", timeout: float = 60) -> None:
        """Until the process started as `name` says it is serving (its log has `marker`)."""
        log = self.root / f"{name}.log"
        async with asyncio.timeout(timeout):
            while True:
                if log.exists() and marker in log.read_text():
                    return
                await asyncio.sleep(0.1)

    def said(self, name: str) -> bool:
        """Whether the process started as `name` has logged anything yet."""
        log = self.root / f"{name}.log"
        return log.exists() and log.stat().st_size > 0

    def signal(self, name: str, sig: signal.Signals) -> None:
        self.procs[name].send_signal(sig)

    def kill9(self, name: str) -> None:
        proc = self.procs[name]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def pid(self, name: str) -> int:
        return self.procs[name].pid

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def runs(self, name: str) -> list[str]:
        path = self.root / "workspace" / name
        return path.read_text().splitlines() if path.exists() else []


@asynccontextmanager
async def deployment(
    root: Path,
    script: str,
    *,
    services: tuple[str, ...] = SERVICES,
    log_partitions: int = 1,
    **env: str,
) -> AsyncIterator[tuple[Deployment, Bus]]:
    """Server and services up (the log in `log_partitions` streams); on exit everything
    stopped and closed."""
    subjects = Subjects("ts", log_partitions)
    server = EmbeddedServer(
        root / "nats", log_file=root / "nats-server.log", subjects=subjects
    ).start()
    try:
        bus = await connect(server.url, subjects, ensure=StreamLimits())
        d = Deployment(root, server, script, **env)
        try:
            for name in services:
                d.start(name)
            await until_serving(bus, d)
            yield d, bus
        finally:
            d.stop_all()
            await bus.close()
    finally:
        server.stop()


async def until_serving(bus: Bus, d: Deployment, timeout: float = 60) -> None:
    """Wait until every started service has bound its consumer (they start at their pace)."""
    durables = {
        "gateway": ["gateway"],
        "turn_runner": ["turn-runner"],
        "approval": ["approval"],
        "tool_executor": ["tool-executor"],
    }
    log_streams = bus.subjects.log_streams
    wanted = {
        ("TS_INBOUND" if durable == "gateway" else stream, durable)
        for n in d.procs
        if n in durables
        for durable in durables[n]
        for stream in log_streams
    }
    async with asyncio.timeout(timeout):
        for stream, durable in wanted:
            while True:
                try:
                    info = await bus.js.consumer_info(stream, durable)
                    if info.push_bound or durable == "gateway":
                        break
                except Exception:
                    pass
                await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)  # the gateway's first fetch, the runner's resume scan


async def events(bus: Bus, session: str) -> list[Event]:
    return [s.event for s in await bus.store.read_session(session)]


async def wait_for(
    bus: Bus, session: str, kind: str, *, count: int = 1, timeout: float = 60
) -> list[Event]:
    """The session's events of `kind` once there are `count` of them."""
    async with asyncio.timeout(timeout):
        while True:
            found = [e for e in await events(bus, session) if e.type == kind]
            if len(found) >= count:
                return found
            await asyncio.sleep(0.1)


async def wait_idle(bus: Bus, session: str, quiet_s: float = 1.5, timeout: float = 60) -> None:
    """Until the session's log has not grown for `quiet_s` (anything late would be there)."""
    async with asyncio.timeout(timeout):
        last = -1
        while True:
            now = await bus.store.last_seq(session)
            if now == last:
                return
            last = now
            await asyncio.sleep(quiet_s)


class Witness:
    """Every event of a session as JetStream stored it, seen through an ordered consumer
    while the test runs: what must still be in the log at the end (no acked event lost)."""

    def __init__(self, bus: Bus, session: str) -> None:
        self.bus, self.session = bus, session
        self.seen: dict[int, str] = {}
        self.sub: Any = None

    async def __aenter__(self) -> Witness:
        async def on_msg(msg: Any) -> None:
            self.seen[msg.metadata.sequence.stream] = orjson.loads(msg.data)["id"]

        subjects = self.bus.subjects
        self.sub = await self.bus.js.subscribe(  # named: a partitioned log is many streams
            subjects.log_session(self.session),
            stream=subjects.log_stream_of(self.session),
            ordered_consumer=True,
            cb=on_msg,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.sub.unsubscribe()


async def check_invariants(bus: Bus, session: str, witness: Witness | None = None) -> list[Event]:
    """Exactly one TurnEnded per turn and every started turn ended; no witnessed event lost;
    the state rebuilt from the log equals the turn-runner's live state. Returns the log."""
    await wait_idle(bus, session)
    stored = await bus.store.read_session(session)
    log = [s.event for s in stored]
    started = [e.turn_id for e in log if e.type == "SessionTurnStart"]
    ended = [e.turn_id for e in log if e.type == "TurnEnded"]
    assert sorted(ended) == sorted(set(ended)), f"two terminal events: {ended}"
    assert set(started) <= set(ended), f"a turn left open: {set(started) - set(ended)}"
    if witness is not None:
        in_log = {s.seq: s.event.id for s in stored}
        lost = {seq: i for seq, i in witness.seen.items() if in_log.get(seq) != i}
        assert not lost, f"acked events missing from the log: {lost}"
    assert state_from_json(await _live_state(bus, session)) == fold(SessionState.of(session), log)
    return log


async def _live_state(bus: Bus, session: str) -> bytes:
    """The runner's live state; a runner just restarted answers once its API is up (the
    log can hold the events it decided before then: they were decided while it started)."""
    async with asyncio.timeout(30):
        while True:
            try:
                return await live_state(bus, session, 10)
            except NoResponders:
                await asyncio.sleep(0.1)
