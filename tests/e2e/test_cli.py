"""The CLI and all services as processes, the way a user runs them."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.processes import cli, running_up

pytestmark = pytest.mark.e2e
SCRIPT = """
replies:
  - text: "echo: {input}"
  - error: {error_class: server_error, message: "scripted outage", status_code: 500}
"""


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    root = tmp_path_factory.mktemp("e2e")
    (root / "script.yaml").write_text(SCRIPT)
    with running_up(root, TURNSTREAM_SCRIPT=str(root / "script.yaml"), COLUMNS="120") as (
        env,
        output,
    ):
        yield env
    assert "stopped" in output[0]


def test_send_streams_the_reply_and_exits_zero(deployment: dict[str, str]) -> None:
    result = cli("send", "e2e-1", "hello from the CLI", env=deployment)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "echo: hello from the CLI" in result.stdout
    assert "SEND_REQUEST" in result.stdout and "completed" in result.stdout


def test_send_takes_a_long_message_from_a_file_or_stdin(
    deployment: dict[str, str], tmp_path: Path
) -> None:
    long = "a long message " * 40
    (tmp_path / "message.txt").write_text(long)
    result = cli("send", "e2e-long", "--file", str(tmp_path / "message.txt"), env=deployment)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "echo: a long message a long message" in result.stdout
    piped = cli("send", "e2e-long-2", "-", env=deployment, input="from stdin\n")
    assert piped.returncode == 0, piped.stdout + piped.stderr
    assert "echo: from stdin" in piped.stdout
    neither = cli("send", "e2e-long", env=deployment)
    assert neither.returncode == 2 and "--file" in neither.stderr


def test_replay_prints_the_turn_with_its_stage_timeline(deployment: dict[str, str]) -> None:
    assert cli("send", "e2e-2", "first", env=deployment).returncode == 0
    result = cli("replay", "e2e-2", env=deployment)
    assert result.returncode == 0, result.stderr
    for stage in ("RECEIVE_INPUT", "COMPOSE_REQUEST", "SEND_REQUEST", "STREAM_RESPONSE", "RENDER"):
        assert stage in result.stdout
    assert "completed" in result.stdout and "echo: first" in result.stdout


def test_a_failed_turn_exits_non_zero_with_reason_and_next_action(
    deployment: dict[str, str],
) -> None:
    assert cli("send", "e2e-3", "one", env=deployment).returncode == 0
    result = cli("send", "e2e-3", "two", env=deployment)  # script reply 2 is an outage
    assert result.returncode == 1
    assert "provider_error" in result.stderr and "next:" in result.stderr


def test_bad_session_id_is_reported_not_hung(deployment: dict[str, str]) -> None:
    result = cli("send", "no spaces allowed", "hi", env=deployment, timeout=30)
    assert result.returncode != 0
    assert "session" in (result.stdout + result.stderr).lower()


def test_tail_history_shows_one_line_per_event(deployment: dict[str, str]) -> None:
    assert cli("send", "e2e-4", "tail me", env=deployment).returncode == 0
    tail = subprocess.Popen(
        [sys.executable, "-m", "turnstream.cli", "tail", "e2e-4", "--history"],
        env=deployment,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert tail.stdout is not None
    lines = []
    for line in tail.stdout:  # until the history's last event (a slow start prints it late)
        if "e2e-4" in line:
            lines.append(line)
        if "SessionTurnEnd" in line:
            break
    tail.send_signal(signal.SIGINT)
    tail.communicate(timeout=10)
    assert len(lines) == 13  # a text turn: 4 stage transitions are one event each
    assert "InputAccepted" in lines[0] and "SessionTurnEnd" in lines[-1]


def test_status_answers_with_the_live_state(deployment: dict[str, str]) -> None:
    assert cli("send", "e2e-5", "status?", env=deployment).returncode == 0
    result = cli("status", "e2e-5", "--json", env=deployment)
    assert '"turns_ended":1' in result.stdout
    readable = cli("status", "e2e-5", env=deployment)
    assert readable.returncode == 0, readable.stderr
    assert "turns ended:  1 (last completed" in readable.stdout
    assert "active turn:  none" in readable.stdout and "{" not in readable.stdout


def test_status_of_an_unknown_session_exits_one(deployment: dict[str, str]) -> None:
    result = cli("status", "e2e-never-used", env=deployment)
    assert result.returncode == 1 and "has no events" in result.stderr


def test_schemas_check_passes_on_the_committed_files() -> None:
    root = Path(__file__).parents[2]
    result = subprocess.run(
        [sys.executable, "-m", "turnstream.cli", "schemas", "export", "--check"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def test_replay_travels_in_time_and_verifies_against_the_live_state(
    deployment: dict[str, str],
) -> None:
    import json
    from datetime import UTC, datetime

    assert cli("send", "e2e-6", "first", env=deployment).returncode == 0
    between = datetime.now(UTC).isoformat()
    assert cli("send", "e2e-6", "second", env=deployment).returncode == 1  # reply 2 fails
    now = json.loads(cli("replay", "e2e-6", "--json", env=deployment).stdout)
    assert now["turns_ended"] == 2 and now["last_status"] == "failed"
    then = json.loads(cli("replay", "e2e-6", "--json", "--at-time", between, env=deployment).stdout)
    assert then["turns_ended"] == 1 and then["last_status"] == "completed"
    assert (
        json.loads(cli("replay", "e2e-6", "--json", "--at", "0", env=deployment).stdout)[
            "turns_ended"
        ]
        == 0
    )
    verified = cli("replay", "e2e-6", "--verify", env=deployment)
    assert verified.returncode == 0, verified.stderr
    assert "equals the live state" in verified.stdout


@pytest.mark.parametrize("workflow", ["nope", "../etc"])
def test_attaching_an_unknown_workflow_shows_the_rejection_and_exits_non_zero(
    deployment: dict[str, str], workflow: str
) -> None:
    args = ("workflow", "attach", "e2e-wf", workflow, "--timeout", "20")
    result = cli(*args, env=deployment, timeout=40)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "rejected (workflow_invalid)" in result.stderr, result.stderr
    assert repr(workflow) in result.stderr


async def _rejection_of(env: dict[str, str], session: str, body: bytes, msg_id: str) -> Any:
    """Publish raw `body` to the session's inbound subject; the InputRejected it earns."""
    from turnstream.bus import connect
    from turnstream.core.events import InputRejected, decode
    from turnstream.core.subjects import Subjects

    url = (Path(env["TURNSTREAM_DATA_DIR"]) / "nats.url").read_text().strip()
    bus = await connect(url, Subjects())
    found: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    async def on_log(msg: Any) -> None:
        event = decode(msg.data)
        if isinstance(event, InputRejected) and not found.done():
            found.set_result(event)

    sub = await bus.nc.subscribe(bus.subjects.log_session(session), cb=on_log)
    try:
        headers = {"Nats-Msg-Id": msg_id}
        await bus.js.publish(bus.subjects.inbound(session), body, headers=headers)
        async with asyncio.timeout(20):
            return await found
    finally:
        await sub.unsubscribe()
        await bus.close()


async def test_a_rejected_unparsable_body_carries_the_nats_msg_id(
    deployment: dict[str, str],
) -> None:
    rejected = await _rejection_of(deployment, "e2e-raw", b"{oops", "raw-key-1")
    assert rejected.data.kind == "not_json" and rejected.correlation_id == "raw-key-1"


async def test_an_answer_to_an_unknown_interaction_is_rejected(
    deployment: dict[str, str],
) -> None:
    answer = {
        "type": "answer",
        "sessionId": "e2e-answer",
        "chatId": "e2e-answer",
        "sender": {"kind": "human", "id": "u1"},
        "idempotencyKey": "answer-nobody-asked",
        "interactionId": "no-such-prompt",
        "decision": "approve",
    }
    rejected = await _rejection_of(
        deployment, "e2e-answer", json.dumps(answer).encode(), "answer-nobody-asked"
    )
    assert rejected.data.kind == "unknown_interaction"
    assert "no-such-prompt" in rejected.data.reason
    assert rejected.correlation_id == "answer-nobody-asked"


def test_replay_and_interrupt_of_an_unknown_session_say_no_such_session(
    deployment: dict[str, str],
) -> None:
    replay = cli("replay", "e2e-never-seen", env=deployment)
    assert replay.returncode == 1, replay.stdout + replay.stderr
    assert "no such session: e2e-never-seen" in replay.stderr, replay.stderr
    interrupt = cli("interrupt", "e2e-never-seen", "--hard", env=deployment)
    assert interrupt.returncode == 1, interrupt.stdout + interrupt.stderr
    assert "no such session: e2e-never-seen" in interrupt.stderr, interrupt.stderr
    assert "nothing was sent" in interrupt.stderr and "sent a" not in interrupt.stdout
