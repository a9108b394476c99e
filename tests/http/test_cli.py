"""`turnstream up` serves the HTTP face too; `turnstream http` is the command alone."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.processes import cli, running_up
from turnstream.bus.embedded import free_port

pytestmark = pytest.mark.e2e


def test_up_serves_http_and_a_message_round_trips(tmp_path: Path) -> None:
    port = free_port()
    addr = f"127.0.0.1:{port}"
    with running_up(tmp_path, TURNSTREAM_HTTP_ADDR=addr, TURNSTREAM_SECURITY_MODE="auto") as (
        _env,
        output,
    ):
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/readyz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "http did not come up under `up`"
            time.sleep(0.2)
        r = httpx.post(
            f"{url}/v1/sessions/up-1/messages?wait=true", json={"text": "hi"}, timeout=30
        )
        assert r.status_code == 200, r.text
        assert r.json()["data"]["status"] == "completed"
        assert 'You said: "hi"' in r.json()["data"]["reply"]
    assert f"http://127.0.0.1:{port}/docs" in output[0]


def test_up_runs_on_when_the_http_address_is_taken(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        addr = f"127.0.0.1:{port}"
        with running_up(tmp_path, TURNSTREAM_HTTP_ADDR=addr, TURNSTREAM_SECURITY_MODE="auto") as (
            env,
            output,
        ):
            sent = cli("send", "taken-1", "hello", env=env)
            assert sent.returncode == 0, sent.stdout + sent.stderr
            # the HTTP process says why it gave up, and `up` says so (at its next check, or
            # as it stops); waited for, not slept: a loaded machine starts a process slowly
            http_log = tmp_path / "data" / "http.log"
            deadline = time.monotonic() + 30
            while "cannot serve HTTP" not in (http_log.read_text() if http_log.exists() else ""):
                assert time.monotonic() < deadline, "the http process never gave up"
                time.sleep(0.2)
    assert "http not served" in output[0]


def test_the_http_command_is_listed() -> None:
    done = cli("http", "--help", env={"COLUMNS": "160", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0
    assert "--keys-file" in done.stdout and "--addr" in done.stdout
