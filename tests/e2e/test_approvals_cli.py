"""Approvals from the command line: the built-in demo's tool call in `ask` mode."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.processes import (
    Terminal,
    cli,
    cli_background,
    interaction_id,
    pending_prompt,
    running_up,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    root = tmp_path_factory.mktemp("e2e-approvals")
    (root / "workspace").mkdir()
    (root / "workspace" / "hello.txt").write_text("hi\n")
    with running_up(
        root,
        TURNSTREAM_WORKSPACE=str(root / "workspace"),
        TURNSTREAM_SECURITY_MODE="ask",
        TURNSTREAM_WORKFLOWS=str(Path(__file__).resolve().parents[2] / "workflows"),
    ) as (env, _):
        yield env


def test_demo_tool_call_waits_for_approval_then_completes(deployment: dict[str, str]) -> None:
    send = cli_background("send", "demo-ask", "what is here?", env=deployment)
    pending = pending_prompt(deployment, "list_dir")
    assert "list_dir" in pending and "demo-ask" in pending, pending
    interaction = interaction_id(pending)
    narrow = cli("approvals", env={**deployment, "COLUMNS": "80"}).stdout
    assert "path = '.'" in narrow and interaction in narrow, narrow  # nothing cut at 80
    approved = cli("approve", interaction, "--reason", "looks fine", env=deployment)
    assert approved.returncode == 0, approved.stderr
    out, errors = send.communicate(timeout=30)
    assert send.returncode == 0, out + errors
    assert "waiting for y or n on stdin" in out and "turnstream approve" in out
    assert "hello.txt" in out and "completed" in out
    assert cli("approvals", env=deployment).stdout.strip() == "no pending approvals"
    replay = cli("replay", "demo-ask", env={**deployment, "COLUMNS": "80"})
    assert replay.returncode == 0, replay.stderr
    assert "session demo-ask: 1 turn," in replay.stdout, replay.stdout
    assert "list_dir (approval wait" in replay.stdout, replay.stdout
    assert "list_dir(path='.') approved by human:cli after waiting" in replay.stdout


def test_deny_says_denied(deployment: dict[str, str]) -> None:
    send = cli_background("send", "demo-deny", "look", env=deployment)
    interaction = interaction_id(pending_prompt(deployment, "demo-deny", "demo-deny"))
    denied = cli("deny", interaction, "--reason", "not now", env=deployment)
    assert denied.returncode == 0, denied.stderr
    assert denied.stdout.startswith(f"denied list_dir ({interaction})"), denied.stdout
    send.communicate(timeout=30)


def test_with_nothing_on_stdin_send_says_a_prompt_waits_and_ends_at_once(
    deployment: dict[str, str],
) -> None:
    result = cli("send", "demo-none", "look", env=deployment, timeout=20)  # stdin: /dev/null
    out = result.stdout + result.stderr
    assert result.returncode == 4, out  # PROMPT_WAITING: not 0, 1 (denied) or 2
    assert "approval needed" in out and "nothing (more) on stdin" in out, out
    interaction = interaction_id(pending_prompt(deployment, "demo-none", "demo-none"))
    assert f"approve {interaction}" in " ".join(out.split()), out
    assert "answered: denied" not in out
    assert cli("approve", interaction, env=deployment).returncode == 0  # it still waited


def test_with_nothing_on_stdin_workflow_attach_ends_at_its_prompt(
    deployment: dict[str, str],
) -> None:
    task = '{"task": "write notes"}'
    attach = cli(
        "workflow",
        "attach",
        "wf-none",
        "review-and-implement",
        "--ctx",
        task,
        env=deployment,
        timeout=60,
    )
    out = attach.stdout + attach.stderr
    assert attach.returncode == 4, out
    assert "approval needed" in out and "nothing (more) on stdin" in out, out
    interaction = interaction_id(pending_prompt(deployment, "grep", "wf-none"))
    assert cli("deny", interaction, env=deployment).returncode == 0


def test_answering_an_unknown_prompt_says_how_to_find_the_real_ones(
    deployment: dict[str, str],
) -> None:
    result = cli("deny", "not-a-prompt", env=deployment)
    assert result.returncode == 1
    assert "turnstream approvals" in result.stderr


def test_interrupt_stops_a_turn_waiting_for_approval(deployment: dict[str, str]) -> None:
    send = cli_background("send", "demo-stop", "look around", env=deployment)
    pending_prompt(deployment, "demo-stop")
    result = cli("interrupt", "demo-stop", "--hard", env=deployment)
    assert result.returncode == 0 and "hard interrupt" in result.stdout
    _, errors = send.communicate(timeout=30)
    assert send.returncode == 1
    assert "interrupted" in errors and "next:" in errors


def test_the_example_workflow_from_the_cli_with_its_grant_prompt(
    deployment: dict[str, str],
) -> None:
    task = '{"task": "write notes"}'
    narrow = {**deployment, "COLUMNS": "80"}
    attach = cli_background(
        "workflow", "attach", "wf-e2e", "review-and-implement", "--ctx", task, env=narrow
    )
    pending = pending_prompt(deployment, "grep", "wf-e2e")
    assert "grep" in pending, pending
    interaction = interaction_id(pending)
    assert cli("approve", interaction, env=deployment).returncode == 0
    out, errors = attach.communicate(timeout=60)
    assert attach.returncode == 0, out + errors
    assert f"approve|deny {interaction}" in out, out  # the id whole on its line at 80 cols
    for line in ("▶ plan entered", "review-tests: completion no_call", "granted grep"):
        assert line in out, out
    assert "without calling the completion tool" in " ".join(out.split())  # what no_call is
    assert "workflow review-and-implement completed" in out
    status = cli("workflow", "status", "wf-e2e", env=deployment)
    assert status.returncode == 0, status.stderr
    for stage in ("plan", "review-risks", "review-tests", "summarize", "implement"):
        assert stage in status.stdout
    assert status.stdout.count(" ok ") >= 5, status.stdout
    assert "pending" not in status.stdout, status.stdout  # a completed run has none left
    replay = cli("replay", "wf-e2e", env=deployment)
    assert replay.returncode == 0, replay.stderr
    assert status.stdout.strip() in replay.stdout  # replay shows the same stage graph


def test_workflow_attach_on_a_terminal_asks_its_prompt_inline(
    deployment: dict[str, str],
) -> None:
    task = '{"task": "write notes"}'
    env = {**deployment, "COLUMNS": "80"}
    term = Terminal(env, "workflow", "attach", "wf-tty", "review-and-implement", "--ctx", task)
    term.read_until("[y/N]", timeout=60)
    term.type("y\n")
    term.read_until("workflow review-and-implement completed", timeout=60)
    assert term.wait() == 0, term.screen


def test_workflow_validate_reports_every_problem(
    deployment: dict[str, str], tmp_path: Path
) -> None:
    ok = cli(
        "workflow",
        "validate",
        deployment["TURNSTREAM_WORKFLOWS"] + "/review-and-implement",
        env=deployment,
    )
    assert ok.returncode == 0 and "review-and-implement" in ok.stdout, ok.stderr
    (tmp_path / "workflow.yaml").write_text("name: bad\nsteps: [a]\n")
    (tmp_path / "a.md").write_text("---\nid: a\nname: A\nturnCap: 0\n---\n{{env.HOME}}\n")
    bad = cli("workflow", "validate", str(tmp_path), env=deployment)
    assert bad.returncode == 1
    for needle in ("turnCap", "allowedTools", "completionSchema", "env and settings", "fix:"):
        assert needle in bad.stderr, bad.stderr
