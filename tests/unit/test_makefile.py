"""`make up` on a fresh clone says what it is doing while it installs (issue 18)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_up_shows_progress_while_it_installs(tmp_path: Path) -> None:
    dry = subprocess.run(
        ["make", "-n", "up", f"VENV={tmp_path / 'venv'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    steps = [line for line in dry.splitlines() if line.startswith("echo")]
    assert len(steps) >= 4, dry  # each install step, then the start, is announced
    install = next(line for line in dry.splitlines() if "-e '.[dev]'" in line)
    assert "--quiet" not in install and "-q " not in install  # pip's own progress shows
