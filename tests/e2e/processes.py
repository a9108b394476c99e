"""The CLI as a user runs it: `turnstream up` in the background, commands as processes."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def cli(
    *args: str, env: dict[str, str], timeout: float = 60, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The command run to its end; its stdin is `input` piped, else nothing."""
    return subprocess.run(
        [sys.executable, "-m", "turnstream.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
    )


@contextmanager
def running_up(root: Path, **settings: str) -> Iterator[tuple[dict[str, str], list[str]]]:
    """`turnstream up` on a data dir under `root` with `settings` (TURNSTREAM_* and such);
    yields the environment for commands and, once it stopped, its output (one string)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTREAM_")}
    env.update(
        TURNSTREAM_DATA_DIR=str(root / "data"),
        TURNSTREAM_CONFIG=str(root / "absent.yaml"),
        COLUMNS="160",
    )
    env.update(settings)
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
    time.sleep(1.5)  # the services connect and create their consumers
    output: list[str] = []
    try:
        yield env, output
    finally:
        up.send_signal(signal.SIGTERM)
        out, _ = up.communicate(timeout=30)
        output.append(out)
        assert up.returncode == 0, out
        assert not url_file.exists()


def cli_background(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """A command left running (it waits for a turn or a run); `communicate()` ends it.
    Its stdin is a pipe left open and silent, so an approval prompt waits for an answer
    given elsewhere (with nothing at all on stdin, `send` would end at the prompt)."""
    return subprocess.Popen(
        [sys.executable, "-m", "turnstream.cli", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.PIPE,
        text=True,
    )


def pending_prompt(env: dict[str, str], needle: str, *args: str, tries: int = 120) -> str:
    """`turnstream approvals [args]` once its output holds `needle` (the last output if
    it never does): what the user sees while a prompt waits."""
    pending = ""
    for _ in range(tries):
        pending = cli("approvals", *args, env=env).stdout
        if needle in pending:
            break
        time.sleep(0.25)
    return pending


def interaction_id(pending: str) -> str:
    """The first prompt's id in `turnstream approvals` output (a UUID: four dashes)."""
    return next(
        word for line in pending.splitlines() for word in line.split() if word.count("-") == 4
    )


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
