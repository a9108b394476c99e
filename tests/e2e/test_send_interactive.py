"""`turnstream send` on a terminal, as a person uses it: the inline approval prompt and
Ctrl-C, driven through a pseudo-terminal (what tmux or a real terminal gives it)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.e2e.processes import Terminal, cli, interaction_id, pending_prompt, running_up

pytestmark = pytest.mark.e2e
SCRIPT = """
replies:
  - text: "Let me look."
    tool_calls: [{name: list_dir, arguments: {path: "."}}]
  - text: "one two three four five six seven eight nine ten eleven twelve"
    delay_ms: 400
"""


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    root = tmp_path_factory.mktemp("e2e-tty")
    (root / "workspace").mkdir()
    (root / "script.yaml").write_text(SCRIPT)
    with running_up(
        root,
        TURNSTREAM_WORKSPACE=str(root / "workspace"),
        TURNSTREAM_SECURITY_MODE="ask",
        TURNSTREAM_SCRIPT=str(root / "script.yaml"),
        COLUMNS="200",
    ) as (env, _):
        yield env


def test_an_answer_from_another_terminal_ends_the_prompt_at_once(
    deployment: dict[str, str],
) -> None:
    started = time.monotonic()
    term = Terminal(deployment, "send", "tty-1", "what is here?")
    term.read_until("[y/N]")
    time.sleep(2)  # a person thinks; the turn's own time does not include this
    interaction = interaction_id(pending_prompt(deployment, "tty-1", "tty-1"))
    assert cli("approve", interaction, env=deployment).returncode == 0
    screen = term.read_until("completed")  # no Enter was pressed
    assert "answered elsewhere: approved by human:cli" in screen
    assert term.wait() == 0
    wall_s = time.monotonic() - started
    times = re.search(r"· (\d+) ms \(\+ ([\d.]+) s waiting for approval\)", term.screen)
    assert times, term.screen
    turn_s, waited_s = int(times[1]) / 1000, float(times[2])
    assert waited_s >= 2  # the person's time is reported apart from the turn's
    assert turn_s + waited_s <= wall_s, (turn_s, waited_s, wall_s)


def test_ctrl_c_at_the_prompt_says_what_is_pending_and_how_to_answer(
    deployment: dict[str, str],
) -> None:
    term = Terminal(deployment, "send", "tty-2", "look")
    term.read_until("[y/N]")
    term.type("ye\x03")  # half an answer, then Ctrl-C
    assert term.wait() == 130
    screen = term.screen
    assert "the turn goes on" in screen and "waiting for approval: list_dir(path='.')" in screen
    interaction = interaction_id(pending_prompt(deployment, "tty-2", "tty-2"))
    assert f"approve {interaction}" in screen and f"deny {interaction}" in screen
    assert "interrupt tty-2" in screen and "tail tty-2" in screen
    # the turn did go on, waiting: answer it now
    assert cli("deny", interaction, env=deployment).returncode == 0


def test_ctrl_c_while_tokens_stream_says_the_turn_goes_on(deployment: dict[str, str]) -> None:
    term = Terminal(deployment, "send", "tty-3", "talk slowly")
    term.read_until("[y/N]")
    term.type("y\n")
    term.read_until("three")  # the slow reply is streaming
    term.type("\x03")
    assert term.wait() == 130
    assert "the turn goes on" in term.screen and "tail tty-3" in term.screen
    assert "waiting for approval" not in term.screen.split("the turn goes on")[1]


def test_ctrl_c_while_quiet_waits_for_an_approval_ends_quietly(
    deployment: dict[str, str],
) -> None:
    term = Terminal(deployment, "send", "-q", "tty-4", "look")
    term.read_until("approve")  # -q on a terminal: no inline prompt, how to answer instead
    assert "[y/N]" not in term.screen
    term.type("\x03")
    assert term.wait() == 130
    assert "Traceback" not in term.screen and "Task exception" not in term.screen, term.screen
    assert "the turn goes on" in term.screen
    interaction = interaction_id(pending_prompt(deployment, "tty-4", "tty-4"))
    assert cli("deny", interaction, env=deployment).returncode == 0


def test_a_piped_answer_approves_the_call(deployment: dict[str, str]) -> None:
    result = cli("send", "tty-5", "look", env=deployment, input="y\n")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "y (from stdin)" in result.stdout and "completed" in result.stdout


def test_a_silent_pipe_says_what_the_prompt_waits_for_then_takes_its_answer(
    deployment: dict[str, str],
) -> None:
    send = subprocess.Popen(
        [sys.executable, "-m", "turnstream.cli", "send", "tty-6", "look"],
        env=deployment,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert send.stdout is not None and send.stdin is not None
    seen = ""
    while "waiting for y or n on stdin" not in seen:
        line = send.stdout.readline()
        assert line, seen  # it ended without saying so
        seen += line
    send.stdin.write("y\n")
    send.stdin.close()
    out = seen + send.stdout.read()
    send.stdout.close()
    assert send.wait(timeout=60) == 0, out
    assert "approve|deny" in out and "y (from stdin)" in out and "completed" in out
