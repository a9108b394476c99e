"""`turnstream send` on a terminal, as a person uses it: the inline approval prompt and
Ctrl-C, driven through a pseudo-terminal (what tmux or a real terminal gives it)."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import sys
import time
from collections.abc import Iterator

import pytest

from tests.e2e.processes import cli, interaction_id, pending_prompt, running_up

pytestmark = pytest.mark.e2e
SCRIPT = """
replies:
  - text: "Let me look."
    tool_calls: [{name: list_dir, arguments: {path: "."}}]
  - text: "one two three four five six seven eight nine ten eleven twelve"
    delay_ms: 400
"""
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


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


class Terminal:
    """`turnstream <args>` with a pseudo-terminal as its controlling terminal."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: stdin/stdout/stderr are the terminal
            os.execve(sys.executable, [sys.executable, "-m", "turnstream.cli", *args], env)
        self.pid, self.fd, self.screen = pid, fd, ""

    def read_until(self, needle: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while needle not in self.screen:
            left = deadline - time.monotonic()
            assert left > 0, f"{needle!r} not on the screen:\n{self.screen}"
            if select.select([self.fd], [], [], left)[0]:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:  # the child ended
                    chunk = b""
                if not chunk:
                    assert needle in self.screen, f"ended without {needle!r}:\n{self.screen}"
                self.screen += ANSI.sub("", chunk.decode(errors="replace")).replace("\r", "")
        return self.screen

    def type(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def wait(self, timeout: float = 30) -> int:
        """The exit code, once the command ended (everything it printed read)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if select.select([self.fd], [], [], 0.2)[0]:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:
                    chunk = b""
                self.screen += ANSI.sub("", chunk.decode(errors="replace")).replace("\r", "")
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError(f"still running:\n{self.screen}")


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
