"""Every log line passes the same redaction as events (issue 23 item 6): a secret quoted by
a tool's exception appears neither in the event nor in the tool-executor's log file, whose
traceback is still there (a real process, as its own NATS user, with the shipped accounts)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import only, wait_for
from tests.integration.test_tools_path import script
from tests.security.conftest import SecureServer, apply_as_operator
from tests.security.leaky import registry
from tests.security.test_identities import as_user, settings
from turnstream.approval import app as approval
from turnstream.client import message_command, publish_command
from turnstream.core.events import ToolInvocationFailed, TurnEnded
from turnstream.gateway import app as gateway
from turnstream.turn_runner import app as turn_runner

pytestmark = pytest.mark.integration
SECRET = "hunter2secretXYZ"
ROOT = Path(__file__).resolve().parents[2]


async def test_a_secret_in_a_tools_exception_is_in_no_log(
    secure_server: SecureServer, tmp_path: Path
) -> None:
    await apply_as_operator(secure_server)
    (tmp_path / "workspace").mkdir()
    scripted = script(tmp_path, "{tool_calls: [{name: leak, arguments: {}}]}", "{text: done}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTREAM_")}
    env.update(
        TURNSTREAM_NATS_URL=f"nats://127.0.0.1:{secure_server.port}",
        TURNSTREAM_NATS_USER="tool-executor",
        TURNSTREAM_NATS_PASSWORD=secure_server.passwords["tool-executor"],
        TURNSTREAM_DATA_DIR=str(tmp_path / "data"),
        TURNSTREAM_CONFIG=str(tmp_path / "absent.yaml"),
        TURNSTREAM_WORKSPACE=str(tmp_path / "workspace"),
        # the other services' mode (`settings`): the executor checks the runner's approval
        TURNSTREAM_SECURITY_MODE="auto",
        TURNSTREAM_REDACT_ENV='["LEAKY_TOKEN"]',
        LEAKY_TOKEN=SECRET,
        PYTHONPATH=str(ROOT),
    )
    log_file = tmp_path / "tool_executor.log"
    out = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        executor = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.security.leaky", env=env, stdout=out, stderr=out
        )
    finally:
        os.close(out)
    stop = asyncio.Event()
    of = lambda user: settings(secure_server, user, tmp_path, script=scripted)  # noqa: E731
    try:
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(gateway.serve(of("gateway"), stop, tools=registry()))
            tasks.create_task(turn_runner.serve(of("turn-runner"), stop, tools=registry()))
            tasks.create_task(approval.serve(of("approval"), stop))
            await asyncio.sleep(0.6)
            client = await as_user(secure_server, "client")
            operator = await as_user(secure_server, "operator")
            try:
                await publish_command(client, "leaky", message_command("leaky", "go"))
                events = await wait_for(operator, "leaky", lambda es: only(es, TurnEnded), 30)
            finally:
                await client.close()
                await operator.close()
            stop.set()
    finally:
        executor.send_signal(signal.SIGTERM)
        await asyncio.wait_for(executor.wait(), 30)
    [failed] = only(events, ToolInvocationFailed)
    assert SECRET not in failed.data.error.detail and "[redacted]" in failed.data.error.detail
    logged = log_file.read_text()
    assert "tool leak crashed" in logged and "Traceback" in logged, logged
    assert "login refused for token [redacted]" in logged, logged
    assert SECRET not in logged
