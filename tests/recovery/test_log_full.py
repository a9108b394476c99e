"""The log full (docs/operations.md, "The log full"): `TS_LOG` at its `max_bytes` (discard
new) while a turn waits on the model and a command waits in `TS_INBOUND`. Every service
stays up and says so once at ERROR; `turnstream status` says the log is full; the command
is not acked nor lost; the turn in flight cannot even end. After `turnstream archive` frees
space, that turn ends once (`storage_full`), the held command's turn runs, and a new one
too."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from nats.js import api

from tests.recovery.harness import ROOT, check_invariants, deployment, events, wait_for
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


def _services() -> tuple[str, ...]:
    return ("gateway", "turn_runner", "approval", "tool_executor")
