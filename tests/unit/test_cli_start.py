"""`turnstream --help` and each command's `--help` start without the bus, the client, the
core, NATS or pydantic (typer 0.29 imported pydantic to build a TypeAdapter per option, hence
the pin below 0.29): each command imports those when it runs (bench/cli_start.py times the
starts)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = (
    "turnstream.bus",
    "turnstream.client",
    "turnstream.core",
    "turnstream.settings",
    "nats",
    "pydantic",
)


@pytest.mark.parametrize("args", [["--help"], ["send", "--help"], ["tail", "--help"]])
def test_a_help_imports_nothing_heavy(args: list[str]) -> None:
    code = (
        "import sys\n"
        "from turnstream.cli import app\n"
        f"try:\n    app({args!r})\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in sys.modules if m.startswith({HEAVY!r})))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout[-500:]
