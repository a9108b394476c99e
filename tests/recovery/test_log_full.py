"""The log full (docs/operations.md, "The log full"): `TS_LOG` at its `max_bytes` (discard
new) while a turn waits on the model and a command waits in `TS_INBOUND`. Every service
stays up and says so once at ERROR; `turnstream status` says the log is full; the command
is not acked nor lost; the turn in flight cannot even end. After `turnstream archive` frees
space, that turn ends once (`storage_full`), the held command's turn runs, and a new one
too."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from nats.js import api
from nats.js.errors import ServiceUnavailableError

from tests.recovery.harness import ROOT, check_invariants, deployment, events, wait_for
from tests.telemetry.receiver import Received, otlp_receiver
from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.streams import dead_letter_stream
from turnstream.client import message_command, publish_command
from turnstream.core.events import TurnEnded

pytestmark = pytest.mark.e2e
SCRIPT = """
replies:
  - text: "an answer that takes a while"
    delay_ms: 2500
    chunks: whole
"""
OLD = [f"old-{i}" for i in range(6)]
FULL = "the log is full"


def cli(d_env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnstream.cli", *args],
        env=d_env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_the_log_full_loses_nothing_and_recovers(tmp_path: Path) -> None:
    async with deployment(tmp_path, SCRIPT, services=(*_services(),)) as (d, bus):
        for session in OLD:  # ended sessions, to be archived to free space
            await publish_command(bus, session, message_command(session, "hi"))
        for session in OLD:
            await wait_for(bus, session, "TurnEnded")
        await publish_command(bus, "inflight", message_command("inflight", "hi"))
        await wait_for(bus, "inflight", "ProviderRequestStarted")

        # the log at its limit: not one more event fits
        info = await bus.js.stream_info(bus.subjects.log_stream)
        config = info.config
        config.max_bytes, config.discard = info.state.bytes, api.DiscardPolicy.NEW
        await bus.js.update_stream(config)
        await publish_command(bus, "queued", message_command("queued", "hi"))  # stored
        await asyncio.sleep(6)  # the model answered; nothing can be appended

        for name, proc in d.procs.items():
            assert proc.poll() is None, f"{name} exited"
        for name in ("gateway", "turn_runner"):
            said = (tmp_path / f"{name}.log").read_text()
            assert said.count(FULL) == 1, f"{name} said '{FULL}' {said.count(FULL)} times"
            assert "Traceback" not in said, f"{name} logged a traceback"
        assert not [e for e in await events(bus, "inflight") if e.type == "TurnEnded"]
        assert not await events(bus, "queued"), "an event appended to a full log?"
        gateway = await bus.js.consumer_info(bus.subjects.inbound_stream, "gateway")
        assert gateway.num_ack_pending + gateway.num_pending >= 1, "the command was acked"
        status = cli(d.env, "status")
        assert status.returncode == 1, status.stdout + status.stderr
        assert FULL in status.stdout and "TS_LOG " in status.stdout, status.stdout

        # the operator frees space
        archived = cli(d.env, "archive", "--older-than-days", "0")
        assert archived.returncode == 0, archived.stdout + archived.stderr
        assert f"archived {len(OLD)} session(s)" in archived.stdout, archived.stdout

        [ended] = await wait_for(bus, "inflight", "TurnEnded", timeout=90)
        assert isinstance(ended, TurnEnded)
        assert (ended.data.status, ended.data.failure_class) == ("failed", "storage_full")
        assert ended.data.next_action and "turnstream archive" in ended.data.next_action
        [queued] = await wait_for(bus, "queued", "TurnEnded", timeout=90)
        assert isinstance(queued, TurnEnded) and queued.data.status == "completed"
        await publish_command(bus, "after", message_command("after", "hi"))
        [after] = await wait_for(bus, "after", "TurnEnded", timeout=60)
        assert isinstance(after, TurnEnded) and after.data.status == "completed"
        for session in ("inflight", "queued", "after"):
            await check_invariants(bus, session)
        status = cli(d.env, "status")
        assert status.returncode == 0, status.stdout + status.stderr
        for name, proc in d.procs.items():
            assert proc.poll() is None, f"{name} exited"


BIG_SCRIPT = f"""
replies:
  - text: "{"x" * 40_000}"
    delay_ms: 2000
    chunks: whole
"""
ROOM = 8_000
"""Bytes left in the log: less than the model's answer, more than a turn's end."""


async def test_a_turn_whose_answer_does_not_fit_ends_storage_full_at_once(
    tmp_path: Path,
) -> None:
    async with deployment(tmp_path, BIG_SCRIPT, services=(*_services(),)) as (d, bus):
        await publish_command(bus, "big", message_command("big", "hi"))
        await wait_for(bus, "big", "ProviderRequestStarted")
        info = await bus.js.stream_info(bus.subjects.log_stream)
        config = info.config
        config.max_bytes, config.discard = info.state.bytes + ROOM, api.DiscardPolicy.NEW
        await bus.js.update_stream(config)
        [ended] = await wait_for(bus, "big", "TurnEnded", timeout=30)
        assert isinstance(ended, TurnEnded)
        assert (ended.data.status, ended.data.failure_class) == ("failed", "storage_full")
        assert "maximum bytes exceeded" in (ended.data.reason or "")
        log = await check_invariants(bus, "big")
        assert "ProviderRequestCompleted" not in {e.type for e in log}
        assert log[-1].type == "SessionTurnEnd"
        said = (tmp_path / "turn_runner.log").read_text()
        assert said.count(FULL) == 1 and "Traceback" not in said
        for name, proc in d.procs.items():
            assert proc.poll() is None, f"{name} exited"


STORE_LIMIT = 4 * 1024 * 1024


async def test_the_servers_store_full_is_ridden_out_and_a_purge_frees_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's `max_file_store` reached (every stream and bucket refused, the leases
    too), here by dead letters: the same guarantees; `nats stream purge TS_DEAD` frees it."""
    plain = EmbeddedServer.server_config

    def limited(server: EmbeddedServer) -> str:
        return plain(server).replace(
            "sync_interval:", f"max_file_store: {STORE_LIMIT}, sync_interval:"
        )

    monkeypatch.setattr(EmbeddedServer, "server_config", limited)
    with otlp_receiver() as (endpoint, received):
        otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_METRIC_EXPORT_INTERVAL": "500"}
        await _store_full(tmp_path, received, otel)


async def _store_full(tmp_path: Path, received: Received, otel: dict[str, str]) -> None:
    services = (*_services(), "audit")
    async with deployment(tmp_path, SCRIPT, services=services, **otel) as (d, bus):
        await publish_command(bus, "inflight", message_command("inflight", "hi"))
        await wait_for(bus, "inflight", "ProviderRequestStarted")
        d.signal("gateway", signal.SIGSTOP)  # a command stored, not yet taken
        await publish_command(bus, "queued", message_command("queued", "hi"))
        dead = dead_letter_stream(bus.subjects.prefix)
        with contextlib.suppress(ServiceUnavailableError):  # the store full
            for _ in range(STORE_LIMIT // 100_000 + 1):
                await bus.js.publish(f"{bus.subjects.prefix}.dead.junk", b"x" * 100_000)
        d.signal("gateway", signal.SIGCONT)
        await asyncio.sleep(6)

        for name, proc in d.procs.items():
            assert proc.poll() is None, f"{name} exited"
        for name in ("gateway", "turn_runner"):
            said = (tmp_path / f"{name}.log").read_text()
            assert FULL in said, f"{name} did not say '{FULL}'"
            assert "Traceback" not in said, f"{name} logged a traceback"
        assert not [e for e in await events(bus, "inflight") if e.type == "TurnEnded"]
        assert not await events(bus, "queued")
        status = cli(d.env, "status")
        assert status.returncode == 1 and FULL in status.stdout, status.stdout + status.stderr
        sent = cli(d.env, "send", "refused", "hi", "-q")  # a new command: refused, said so
        assert sent.returncode == 2 and FULL in sent.stderr, sent.stdout + sent.stderr
        _, points = received.snapshot()
        full = {p.service for p in points if p.metric == "turnstream.log.full" and p.total == 1}
        assert {"turnstream-gateway", "turnstream-turn-runner"} <= full, full
        refused = [p for p in points if p.metric == "turnstream.log.appends_refused"]
        assert refused and all(p.total >= 1 for p in refused)

        await bus.js.purge_stream(dead)  # the documented purge
        [ended] = await wait_for(bus, "inflight", "TurnEnded", timeout=90)
        assert isinstance(ended, TurnEnded)
        assert (ended.data.status, ended.data.failure_class) == ("failed", "storage_full")
        [queued] = await wait_for(bus, "queued", "TurnEnded", timeout=90)
        assert isinstance(queued, TurnEnded) and queued.data.status == "completed"
        await publish_command(bus, "after", message_command("after", "hi"))
        [after] = await wait_for(bus, "after", "TurnEnded", timeout=60)
        assert isinstance(after, TurnEnded) and after.data.status == "completed"
        for session in ("inflight", "queued", "after"):
            await check_invariants(bus, session)
        status = cli(d.env, "status")  # every process's alarm is over
        assert status.returncode == 0, status.stdout + status.stderr
        for name, proc in d.procs.items():
            assert proc.poll() is None, f"{name} exited"


def _services() -> tuple[str, ...]:
    return ("gateway", "turn_runner", "approval", "tool_executor")


SLOW_SCRIPT = """
replies:
  - text: "an answer that takes longer than freeing space does"
    delay_ms: 5000
    chunks: whole
"""
REFUSED = "appends refused for storage"


def _said(log: Path, after: int) -> str:
    return log.read_text()[after:]


async def saying(log: Path, words: str, *, times: int = 1, after: int = 0) -> None:
    """Until `log` (past its first `after` characters) says `words` `times` times."""
    async with asyncio.timeout(30):
        while True:
            if _said(log, after).count(words) >= times:
                return
            await asyncio.sleep(0.1)


async def test_a_runner_restarted_on_a_full_log_does_not_go_on_with_a_refused_turn(
    tmp_path: Path,
) -> None:
    """The model's answer refused and even the turn's end: the refusal lives in the runner
    alone. Killed and started again on the full log, the new runner ends that turn
    `storage_full` (as the old one would have), without calling the model again; space
    freed while a new call would still be running does not let it complete."""
    async with deployment(tmp_path, SLOW_SCRIPT, services=(*_services(),)) as (d, bus):
        for session in OLD:
            await publish_command(bus, session, message_command(session, "hi"))
        for session in OLD:
            await wait_for(bus, session, "TurnEnded", timeout=30)
        await publish_command(bus, "inflight", message_command("inflight", "hi"))
        await wait_for(bus, "inflight", "ProviderRequestStarted")
        info = await bus.js.stream_info(bus.subjects.log_stream)
        config = info.config
        config.max_bytes, config.discard = info.state.bytes, api.DiscardPolicy.NEW
        await bus.js.update_stream(config)
        said = tmp_path / "turn_runner.log"
        await saying(said, REFUSED, times=2)  # the answer refused, and the turn's end too

        d.kill9("turn_runner")
        before = said.read_text()
        d.start("turn_runner")
        await saying(said, "resuming 1 session(s)", after=len(before))
        # space freed well before a model called again at the restart would answer
        archived = cli(d.env, "archive", "--older-than-days", "0")
        assert archived.returncode == 0, archived.stdout + archived.stderr
        [ended] = await wait_for(bus, "inflight", "TurnEnded", timeout=60)
        assert isinstance(ended, TurnEnded)
        assert (ended.data.status, ended.data.failure_class) == ("failed", "storage_full")
        await asyncio.sleep(3)  # past the answer of a call made at the restart
        log = await check_invariants(bus, "inflight")  # one end, nothing after it
        assert "ProviderRequestCompleted" not in {e.type for e in log}
        assert [e.type for e in log].count("TurnEnded") == 1
        restarted = said.read_text()[len(before) :]
        assert restarted.count(FULL) == 1 and "Traceback" not in restarted, restarted
        assert "TS_LOG holds" in restarted, restarted  # known at start, not by a refusal
        await publish_command(bus, "after", message_command("after", "hi"))
        [after] = await wait_for(bus, "after", "TurnEnded", timeout=60)
        assert isinstance(after, TurnEnded) and after.data.status == "completed"
        for name, proc in d.procs.items():
            assert proc.poll() is None, f"{name} exited"
