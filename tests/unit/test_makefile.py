"""`make up` on a fresh clone says what it is doing while it installs (issue 18), and
installs only what running needs; `make test` adds the dev tools (issue 28). Dry runs on a
virtualenv that does not exist yet."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


def dry_run(target: str, venv: Path) -> list[str]:
    if shutil.which("make") is None:
        pytest.fail("make is not installed (the README's two commands need it)")
    return subprocess.run(
        ["make", "-n", target, f"VENV={venv}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.splitlines()


def test_make_up_shows_progress_while_it_installs(tmp_path: Path) -> None:
    dry = dry_run("up", tmp_path / "venv")
    steps = [line for line in dry if line.startswith("echo")]
    assert len(steps) >= 4, dry  # each install step, then the start, is announced
    install = next(line for line in dry if "pip install" in line and " -e " in line)
    assert "--quiet" not in install and "-q " not in install  # pip's own progress shows


def test_make_up_installs_no_dev_tools(tmp_path: Path) -> None:
    installs = [line for line in dry_run("up", tmp_path / "venv") if " -e " in line]
    assert installs and all("[dev]" not in line for line in installs), installs


def test_make_test_installs_the_dev_tools(tmp_path: Path) -> None:
    assert any("-e '.[dev]'" in line for line in dry_run("test", tmp_path / "venv"))
