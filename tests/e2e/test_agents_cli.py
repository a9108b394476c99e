"""The README's two-agent example, as a user runs it: `turnstream up` with the built-in
demo script and the shipped profiles, then `send --agent … --reply-to …` and `replay`."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.processes import cli, cli_background, pending_prompt, running_up

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    root = tmp_path_factory.mktemp("agents-e2e")
    (root / "workspace").mkdir()
    (root / "workspace" / "hello.txt").write_text("hi")
    with running_up(
        root,
        TURNSTREAM_AGENTS=str(ROOT / "agents"),
        TURNSTREAM_WORKSPACE=str(root / "workspace"),
        TURNSTREAM_SECURITY_MODE="auto",
        TURNSTREAM_HTTP_ADDR="127.0.0.1:0",
    ) as (env, _):
        yield env


def replay_until(session: str, text: str, env: dict[str, str], timeout: float = 20) -> str:
    deadline = time.monotonic() + timeout
    while True:
        out = cli("replay", session, env=env).stdout
        if text in out or time.monotonic() > deadline:
            return out
        time.sleep(0.3)


def test_a_reply_reaches_the_reply_to_session(deployment: dict[str, str]) -> None:
    result = cli(
        "send", "ask-1", "what is in the workspace?", "--agent", "researcher",
        "--reply-to", "desk", env=deployment,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "hello.txt" in result.stdout and "scripted researcher" in result.stdout
    desk = replay_until("desk", "agent:ask-1", deployment)
    assert "input (agent:ask-1)" in desk and "hello.txt" in desk
    assert "hops 1" in desk  # as the README has it
    assert "→ desk (replyTo" in cli("replay", "ask-1", env=deployment).stdout


def test_the_coordinator_delegates_to_a_sync_sub_turn(deployment: dict[str, str]) -> None:
    # the coordinator's profile says `securityMode: ask`: its spawn waits for a person
    send = cli_background(
        "send", "team", "summarise the workspace", "--agent", "coordinator", env=deployment
    )
    found = re.search(r"interaction (\S+)", pending_prompt(deployment, "spawn", "team"))
    assert found is not None, "no approval prompt for the spawn"
    assert cli("approve", found.group(1), env=deployment).returncode == 0
    out, err = send.communicate(timeout=60)
    assert send.returncode == 0, out + err
    assert "The researcher reports" in out
    replay = cli("replay", "team", env=deployment).stdout
    assert "↳ sub-turn team:sub-" in replay and "(researcher, sync) completed" in replay
    assert "delivered as tool_result" in replay


def test_an_unknown_agent_is_rejected(deployment: dict[str, str]) -> None:
    result = cli("send", "nope", "hi", "--agent", "nobody", env=deployment)
    assert result.returncode == 2  # refused before publishing, as over HTTP
    assert "no agent 'nobody'" in result.stderr and "researcher" in result.stderr
    assert "nothing was sent" in result.stderr
    assert cli("replay", "nope", env=deployment).returncode == 1  # no events: no failed turn


def test_a_message_the_contract_refuses_is_not_sent(deployment: dict[str, str]) -> None:
    result = cli("send", "blank", "   ", env=deployment)
    assert result.returncode == 2 and "only spaces" in result.stderr, result.stderr
    assert cli("replay", "blank", env=deployment).returncode == 1
    result = cli("send", "blank", "hi", "--sender", "robot:r2", env=deployment)
    assert result.returncode == 2 and "sender.kind" in result.stderr, result.stderr
    assert "nothing was sent" in result.stderr
    assert cli("replay", "blank", env=deployment).returncode == 1
