"""`turnstream up` runs the audit service; `sessions`, `audit`, `audit verify|rebuild`."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.e2e.processes import cli, running_up

pytestmark = pytest.mark.e2e
SCRIPT = 'replies:\n  - text: "echo: {input}"\n'


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    root = tmp_path_factory.mktemp("e2e-audit")
    (root / "script.yaml").write_text(SCRIPT)
    with running_up(root, TURNSTREAM_SCRIPT=str(root / "script.yaml")) as (env, output):
        yield env
    assert "audit" in output[0]


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
    earlier = orjson.loads(lines[2])["hash"]  # a head kept before more lines were appended
    result = cli("audit", "verify", str(journal), "--head", earlier, env=deployment)
    assert result.returncode == 0, result.stderr
    assert "the kept head is line 3," in result.stdout
