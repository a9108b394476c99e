"""`make up` installs what running needs; `make test` adds the dev tools (a dry run of each
on a virtualenv that does not exist yet)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def dry_run(target: str, venv: Path) -> str:
    if shutil.which("make") is None:
        pytest.fail("make is not installed (the README's two commands need it)")
    result = subprocess.run(
        ["make", "-n", "-C", str(REPO), target, f"VENV={venv}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_make_up_installs_no_dev_tools(tmp_path: Path) -> None:
    installs = [line for line in dry_run("up", tmp_path / "venv").splitlines() if "-e " in line]
    assert installs and all("[dev]" not in line for line in installs), installs


def test_make_test_installs_the_dev_tools(tmp_path: Path) -> None:
    assert "-e '.[dev]'" in dry_run("test", tmp_path / "venv")
