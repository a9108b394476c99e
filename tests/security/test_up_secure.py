"""`turnstream up --secure`: the embedded server loads ops/accounts.conf, each service runs
as its own user, a tenant's client gets its answer; a wrong password is refused by name."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from turnstream.bus import connect
from turnstream.bus.embedded import free_port
from turnstream.client import TurnOutcome, message_command, send_and_wait
from turnstream.core.subjects import Subjects

pytestmark = pytest.mark.integration
TURNSTREAM = str(Path(sys.executable).parent / "turnstream")
"""The installed command (the console script next to this Python)."""


def cli(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TURNSTREAM, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def started(log: Path) -> bool:
    """The service said it is consuming (the executor: which tools it runs)."""
    text = log.read_text() if log.exists() else ""
    return " consuming " in text or " running [" in text


async def send_as(url: str, partitions: int) -> TurnOutcome:
    bus = await connect(url, Subjects("ts", partitions))
    try:
        return await send_and_wait(bus, message_command("acme", "hello"), timeout=30)
    finally:
        await bus.close()


def _http_ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/readyz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


@pytest.mark.parametrize("partitions", [1, 4], ids=["one-log", "4-partitions"])
def test_up_secure_runs_every_service_under_its_own_identity(
    tmp_path: Path, partitions: int
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTREAM_")}
    env.update(
        TURNSTREAM_LOG_PARTITIONS=str(partitions),
        TURNSTREAM_DATA_DIR=str(tmp_path / "data"),
        TURNSTREAM_CONFIG=str(tmp_path / "absent.yaml"),
        TURNSTREAM_WORKSPACE=str(tmp_path),
        TURNSTREAM_SECURITY_MODE="auto",
        COLUMNS="200",
        TURNSTREAM_HTTP_ADDR=f"127.0.0.1:{free_port()}",
    )
    up = subprocess.Popen(
        [TURNSTREAM, "up", "--secure"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "data" / "nats.url").exists():
            assert up.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        for service in ("gateway", "turn_runner", "approval", "tool_executor"):
            log = tmp_path / "data" / f"{service}.log"
            while not started(log):
                assert up.poll() is None and time.monotonic() < deadline, service
                time.sleep(0.1)
        secrets = dict(
            line.split("=", 1)
            for line in (tmp_path / "data" / "dev-secrets.env").read_text().split()
        )
        assert (tmp_path / "data" / "dev-secrets.env").stat().st_mode & 0o077 == 0
        tenant = {
            **env,
            "TURNSTREAM_NATS_USER": "client-acme",
            "TURNSTREAM_NATS_PASSWORD": secrets["TS_CLIENT_ACME_PASSWORD"],
        }
        # as a tenant's client: the Python client, and the CLI (which creates nothing)
        url = (tmp_path / "data" / "nats.url").read_text().strip()
        password = secrets["TS_CLIENT_ACME_PASSWORD"]
        tenant_url = url.replace("://", f"://client-acme:{password}@")
        outcome = asyncio.run(send_as(tenant_url, partitions))
        assert outcome.status == "completed", outcome
        sent = cli("send", "acme", "hello again", env=tenant, timeout=60)
        assert sent.returncode == 0 and "completed" in sent.stdout, sent.stdout + sent.stderr

        # the HTTP face, as the `http` user: a turn over REST
        base = "http://" + env["TURNSTREAM_HTTP_ADDR"]
        while not _http_ready(base):
            assert up.poll() is None and time.monotonic() < deadline + 30, "http"
            time.sleep(0.2)
        r = httpx.post(
            f"{base}/v1/sessions/web/messages?wait=true", json={"text": "hi"}, timeout=30
        )
        assert r.status_code == 200 and r.json()["data"]["status"] == "completed", r.text

        wrong = {**tenant, "TURNSTREAM_NATS_PASSWORD": "pwwrong"}
        refused = cli("send", "acme", "hello", env=wrong, timeout=30)
        assert refused.returncode != 0
        assert "client-acme" in refused.stdout + refused.stderr
        assert "pwwrong" not in refused.stdout + refused.stderr
    finally:
        up.send_signal(signal.SIGTERM)
        out, _ = up.communicate(timeout=30)
    assert "one NATS user per service" in out, out
    services = ["gateway", "turn_runner", "approval", "tool_executor", "http"]
    services += ["audit"] if partitions == 1 else []  # not started on a partitioned log yet
    for service in services:
        log = (tmp_path / "data" / f"{service}.log").read_text().lower()
        assert "violation" not in log, (service, log)


def banner(up: subprocess.Popen[str], last: str = "Ctrl-C stops everything") -> str:
    """What `up` printed until its banner's `last` line."""
    assert up.stdout is not None
    lines = []
    while not lines or last not in lines[-1]:
        line = up.stdout.readline()
        assert line, "".join(lines)  # `up` ended before its banner
        lines.append(line)
    return "".join(lines)


def ctrl_c(up: subprocess.Popen[str]) -> str:
    """Ctrl-C as a terminal sends it (to the whole process group); the rest of the output."""
    os.killpg(up.pid, signal.SIGINT)
    out, _ = up.communicate(timeout=40)
    assert up.returncode == 0, out
    return out


def test_up_secure_passwords_from_the_environment_its_hint_and_a_clean_stop(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TURNSTREAM_", "TS_"))}
    env.update(
        TURNSTREAM_DATA_DIR=str(data),
        TURNSTREAM_CONFIG=str(tmp_path / "absent.yaml"),
        TURNSTREAM_WORKSPACE=str(tmp_path),
        TURNSTREAM_SECURITY_MODE="auto",
        TURNSTREAM_HTTP_ADDR=f"127.0.0.1:{free_port()}",
        COLUMNS="300",
    )
    started = {**env, "TS_CLIENT_PASSWORD": "fromtheenv123"}
    up = subprocess.Popen(
        [TURNSTREAM, "up", "--secure"],
        env=started,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a shell's job
    )
    try:
        shown = banner(up)
        # "up" only once every service serves and the HTTP face answers
        assert _http_ready("http://" + env["TURNSTREAM_HTTP_ADDR"]), shown
        assert "passwords of client: from the environment" in shown, shown
        assert f"generated now into {data / 'dev-secrets.env'}: " in shown, shown
        assert "admin" in shown.split("generated now into", 1)[1].splitlines()[0], shown
        assert "fromtheenv123" not in (data / "dev-secrets.env").read_text()

        # the hint works as printed, from a shell with only the data dir set
        hint = next(line for line in shown.splitlines() if "try:" in line)
        command = hint.split("try:", 1)[1].strip()
        assert command.endswith('send demo "hello"'), command
        sent = cli("send", "demo", "hello", env=env, timeout=60)
        assert sent.returncode == 0 and "completed" in sent.stdout, sent.stdout + sent.stderr

        # the client's password is the one from the environment `up` was given
        as_client = {**env, "TURNSTREAM_NATS_USER": "client", "TS_CLIENT_PASSWORD": "fromtheenv123"}
        sent = cli("send", "c-1", "hello", env=as_client, timeout=60)
        assert sent.returncode == 0 and "sent" in sent.stdout, sent.stdout + sent.stderr
        assert "permissions violation" not in sent.stdout + sent.stderr
    finally:
        out = ctrl_c(up) if up.poll() is None else ""
    assert "stopped" in out and "Traceback" not in out, out
    for service in ("gateway", "turn_runner", "approval", "tool_executor", "audit", "http"):
        log = (data / f"{service}.log").read_text()
        for noise in ("unexpected EOF", "Connection refused", "Traceback", "TCPTransport"):
            assert noise not in log, (service, log)

    # the open mode on the same data dir says it cannot see the secure one's sessions
    up = subprocess.Popen(
        [TURNSTREAM, "up"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        shown = banner(up)
        listed = cli("sessions", env=env)  # none here: says where the others are
        port = int((data / "nats.port").read_text())
    finally:
        up.send_signal(signal.SIGHUP)  # the terminal closed: `up` stops everything still
        out, _ = up.communicate(timeout=40)
    assert "stopped" in out, out
    with socket.socket() as probe:  # the server is gone too, not left running on its own
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAITs only
        probe.bind(("127.0.0.1", port))
    assert "also holds the log of `turnstream up --secure`" in shown, shown
    assert "no sessions" in listed.stdout, listed.stdout + listed.stderr
    assert "also holds the log of `turnstream up --secure`" in listed.stderr, listed.stderr
    assert "its sessions are not listed here" in shown, shown
