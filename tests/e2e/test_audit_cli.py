"""`turnstream up` runs the audit service; `sessions`, `audit`, `audit verify|rebuild`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

pytestmark = pytest.mark.e2e
SCRIPT = 'replies:\n  - text: "echo: {input}"\n'


def cli(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnstream.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    root = tmp_path_factory.mktemp("e2e-audit")
    script = root / "script.yaml"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTREAM_")}
    env.update(
        TURNSTREAM_DATA_DIR=str(root / "data"),
        TURNSTREAM_SCRIPT=str(script),
        TURNSTREAM_CONFIG=str(root / "absent.yaml"),
        COLUMNS="160",
    )
    up = subprocess.Popen(
        [sys.executable, "-m", "turnstream.cli", "up"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url_file = root / "data" / "nats.url"
    deadline = time.monotonic() + 30
    while not url_file.exists() and time.monotonic() < deadline:
        assert up.poll() is None, up.stdout.read() if up.stdout else ""
        time.sleep(0.1)
    time.sleep(1.0)  # the services connect and create their consumers
    try:
        yield env
    finally:
        up.send_signal(signal.SIGTERM)
        out, _ = up.communicate(timeout=30)
        assert up.returncode == 0, out
        assert "audit" in out


def summary(env: dict[str, str], session: str) -> dict[str, object] | None:
    result = cli("sessions", "--json", env=env)
    assert result.returncode == 0, result.stderr
    found = [orjson.loads(line) for line in result.stdout.splitlines()]
    return next((s for s in found if s["sessionId"] == session), None)


def test_a_turn_is_summarised_audited_and_recorded(deployment: dict[str, str]) -> None:
    assert cli("send", "audit-e2e", "hello", env=deployment).returncode == 0
    deadline = time.monotonic() + 20
    while (found := summary(deployment, "audit-e2e")) is None or found["status"] != "completed":
        assert time.monotonic() < deadline, found
        time.sleep(0.2)
    assert found["turns"] == 1 and found["lastReply"] == "echo: hello"
    table = cli("sessions", env=deployment)
    assert "audit-e2e" in table.stdout and "completed" in table.stdout
    shown = cli("audit", env=deployment)
    assert shown.returncode == 0 and "no violations" in shown.stdout
    journal = Path(deployment["TURNSTREAM_DATA_DIR"]) / "audit.jsonl"
    checked = cli("audit", "verify", str(journal), env=deployment)
    assert checked.returncode == 0, checked.stderr
    assert "records intact" in checked.stdout
    rebuilt = cli("audit", "rebuild", env=deployment)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "rebuilt 1 session(s)" in rebuilt.stdout and "wrote 0" in rebuilt.stdout


def test_verify_names_the_first_tampered_line(deployment: dict[str, str], tmp_path: Path) -> None:
    journal = Path(deployment["TURNSTREAM_DATA_DIR"]) / "audit.jsonl"
    lines = journal.read_bytes().splitlines(keepends=True)
    assert len(lines) >= 5
    edited = tmp_path / "edited.jsonl"
    edited.write_bytes(b"".join([*lines[:3], lines[3].replace(b'"seq":4', b'"seq":5'), *lines[4:]]))
    result = cli("audit", "verify", str(edited), env=deployment)
    assert result.returncode == 1
    assert "line 4 is bad" in result.stderr
    deleted = tmp_path / "deleted.jsonl"
    deleted.write_bytes(b"".join([*lines[:1], *lines[2:]]))
    result = cli("audit", "verify", str(deleted), env=deployment)
    assert result.returncode == 1 and "line 2 is bad" in result.stderr
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"".join(lines[:-1]))
    head = orjson.loads(lines[-1])["hash"]
    result = cli("audit", "verify", str(cut), "--head", head, env=deployment)
    assert result.returncode == 1 and "cut off the end" in result.stderr
