"""What the CLI prints, at 80 columns: nothing a person decides on is cut."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console

from turnstream.cli.audit import sessions_table
from turnstream.cli.render import print_prompt
from turnstream.cli.session_view import plural
from turnstream.core.summary import SessionSummary


def screen(width: int = 80) -> Console:
    return Console(width=width, record=True, color_system=None, highlight=False)


def test_a_prompt_shows_every_argument_in_full() -> None:
    out = screen()
    long_path = "notes/" + "very-long-directory-name/" * 6 + "plan.md"
    print_prompt(
        out,
        {
            "sessionId": "s1",
            "tool": "write_file",
            "args": {"path": long_path, "content": "line one\nline two"},
            "deadline": "2026-01-01T12:05:00+00:00",
            "interactionId": "01a20787-c641-718d-a344-c85f730f5c44",
        },
    )
    text = out.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert long_path in text.replace("\n", "")  # wrapped, not cut
    assert "line one\nline two" in text and "…" not in text
    assert "01a20787-c641-718d-a344-c85f730f5c44" in text


@pytest.mark.parametrize("width", [80, 120, 200])
def test_sessions_keep_one_line_per_session(width: int) -> None:
    summaries = [
        SessionSummary(
            session_id=f"support-{i}",
            status="completed",
            turns=3,
            completed=2,
            failed=1,
            last_reply="Let me look at the workspace first. You said many words here " * 3,
            updated_at=datetime(2026, 1, 1, 12, 0, tzinfo=UTC),
        )
        for i in range(3)
    ]
    out = screen(width)
    out.print(sessions_table(summaries, width))
    rows = [line for line in out.export_text().splitlines() if "support-" in line]
    assert len(rows) == 3, out.export_text()
    assert all("completed" in row and "Let me look" in row for row in rows)


def test_counts_are_plural_only_when_they_should_be() -> None:
    assert plural(1, "turn") == "1 turn" and plural(2, "turn") == "2 turns"
    assert plural(0, "event") == "0 events"


def test_the_startup_hint_spells_the_command_as_this_shell_runs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from turnstream.cli.common import command_name

    program = tmp_path / ".venv" / "bin" / "turnstream"
    program.parent.mkdir(parents=True)
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(program), "up"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert command_name() == ".venv/bin/turnstream"  # not on PATH: as the README has it
    monkeypatch.setenv("PATH", f"{program.parent}:/usr/bin")
    assert command_name() == "turnstream"  # an activated venv
