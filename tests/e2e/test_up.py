"""`turnstream up` owns its data dir: a second one refuses, the port stays across restarts."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.e2e.processes import cli, cli_background, running_up

pytestmark = pytest.mark.e2e


def test_a_second_up_on_the_same_data_dir_refuses_and_names_the_running_one(
    tmp_path: Path,
) -> None:
    url_file = tmp_path / "data" / "nats.url"
    with running_up(tmp_path, TURNSTREAM_SECURITY_MODE="auto") as (env, _):
        url = url_file.read_text().strip()
        second = cli("up", env=env, timeout=30)
        assert second.returncode == 2, second.stdout + second.stderr
        assert "already up" in second.stderr and url in second.stderr, second.stderr
        assert url_file.read_text().strip() == url  # not overwritten, not deleted
        sent = cli("send", "up-1", "still there?", env=env)
        assert sent.returncode == 0, sent.stdout + sent.stderr
    with running_up(tmp_path) as (env, _):
        assert url_file.read_text().strip() == url  # the same port after a restart
        assert cli("replay", "up-1", env=env).returncode == 0


def test_a_connected_tail_says_once_that_the_server_went_away(tmp_path: Path) -> None:
    with running_up(tmp_path, TURNSTREAM_SECURITY_MODE="auto") as (env, _):
        assert cli("send", "tail-1", "hi", env=env).returncode == 0
        tail = cli_background("tail", "--history", env=env)
        assert tail.stdout is not None
        assert "tail-1" in tail.stdout.readline()  # connected: it printed the history
    time.sleep(4)  # the client retries every half second meanwhile
    tail.send_signal(signal.SIGINT)
    out, errors = tail.communicate(timeout=10)
    assert "Traceback" not in errors + out and "Error" not in errors, errors
    assert errors.count("lost the connection to NATS") == 1, errors
