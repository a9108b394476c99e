"""A compromised turn-runner cannot make a tool run where a person must decide (DESIGN §13,
issue 36), tried as an attacker against a real nats-server loaded with the shipped
`ops/accounts.conf`, every service under its own user:

- as the `turn-runner` user, a forged `ToolCallApproved` (and `ToolInvocationRequested`)
  for a call waiting on a person: the tool-executor re-derives the approval from the log,
  does not run the tool and fails the call; the turn ends once; the audit flags it;
- as the `turn-runner` user, an `answer` to the person's subject `ts.in.<session>` is
  refused by the server, and on the runtime's own `ts.in.<session>.agent` rejected by the
  gateway: no `InteractionAnswered`;
- and the paths that should run a tool still do: a person's approval, an allowlist rule,
  a workflow stage's allowed tools (auto: test_identities).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.integration.conftest import events_of, only, running_services, wait_for
from tests.integration.test_tools_path import registry, script
from tests.integration.test_workflows import EXAMPLES, exited, grant_asked
from tests.security.conftest import SecureServer, apply_as_operator
from tests.security.test_identities import SUBJECTS, _collect, as_user, settings
from turnstream.bus import Bus
from turnstream.client import answer_command, attach_command, message_command, publish_command
from turnstream.core.events import (
    AuditViolation,
    Envelope,
    Event,
    InputRejected,
    InteractionAnswered,
    InteractionRequested,
    ToolCallApproved,
    ToolCallApprovedData,
    ToolInvocationFailed,
    ToolInvocationProposed,
    ToolInvocationRequested,
    ToolInvocationRequestedData,
    ToolInvocationStarted,
    ToolInvocationSucceeded,
    TurnEnded,
    WorkflowExit,
    stamp,
)

WRITE = (
    "{tool_calls: [{name: slow_write, arguments: {ms: 1}}]}",
    '{text: "tool said: {last_tool_result}"}',
)
"""One call of `slow_write`, a mutating test tool that records each run in a file."""


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    (tmp_path / "workspace").mkdir()
    return tmp_path


def runs(tmp: Path) -> list[str]:
    """The invocations `slow_write` ran (its side effect)."""
    path = tmp / "workspace" / "slow_write.runs"
    return path.read_text().split() if path.exists() else []


@asynccontextmanager
async def deployment(
    server: SecureServer, tmp: Path, *replies: str, **overrides: object
) -> AsyncIterator[dict[str, Bus]]:
    """The six services, each as its own user, and connections as `operator` (reads the
    log), `client` (an outside gateway) and `turn-runner` (the attacker)."""
    await apply_as_operator(server)
    if replies:
        overrides["script"] = script(tmp, *replies)
    async with running_services(
        lambda user: settings(server, user, tmp, **overrides),
        tools=registry(),
        with_audit=True,
        settle_s=0.6,
    ):
        users = {u: await as_user(server, u) for u in ("operator", "client", "turn-runner")}
        try:
            yield users
        finally:
            for bus in users.values():
                await bus.close()


async def waiting_for_a_person(users: dict[str, Bus], session: str) -> list[Event]:
    """Send a message whose turn calls `slow_write`, in ask mode; its events once the call
    waits for a person."""
    await publish_command(users["client"], session, message_command(session, "write it"))
    return await wait_for(users["operator"], session, lambda es: only(es, InteractionRequested))


def forged(proposal: ToolInvocationProposed) -> list[Event]:
    """What a compromised runner appends for a proposed call: its approval and its request."""
    envelope = Envelope.of(proposal)
    data = proposal.data
    approved = stamp(
        ToolCallApproved,
        ToolCallApprovedData(invocation_id=data.invocation_id, authority="interaction"),
        envelope,
        event_id="01a30000-0000-7000-8000-000000000001",
        time=proposal.time,
        source="approval/forged",  # it may name any source
        causation_id=proposal.id,
    )
    request = stamp(
        ToolInvocationRequested,
        ToolInvocationRequestedData(
            invocation_id=data.invocation_id,
            call_id=data.call_id,
            tool=data.tool,
            args=data.args,
            read_only=False,
            idempotent=False,
            timeout_ms=5000,
            iteration=data.iteration,
        ),
        envelope,
        event_id="01a30000-0000-7000-8000-000000000002",
        time=proposal.time,
        source="turn-runner/forged",
        causation_id=approved.id,
    )
    return [approved, request]


def turn_ended(turn_id: str | None) -> Any:
    return lambda es: [e for e in only(es, TurnEnded) if e.turn_id == turn_id]


async def test_a_forged_approval_of_a_call_waiting_for_a_person_runs_nothing(
    secure_server: SecureServer, tmp: Path
) -> None:
    session = "forge-1"
    async with deployment(secure_server, tmp, *WRITE, security_mode="ask") as users:
        events = await waiting_for_a_person(users, session)
        [proposal] = only(events, ToolInvocationProposed)
        await users["turn-runner"].store.append_facts(forged(proposal))  # the server takes it
        operator = users["operator"]
        events = await wait_for(operator, session, turn_ended(proposal.turn_id), 30)
        events = await wait_for(operator, session, lambda es: only(es, AuditViolation), 15)
    assert runs(tmp) == []
    assert not only(events, ToolInvocationStarted) and not only(events, ToolInvocationSucceeded)
    [failed] = only(events, ToolInvocationFailed)
    assert failed.data.error.error_class == "policy_denied"
    assert failed.data.error.kind == "approval_not_justified"
    assert "not justified by the log" in failed.data.error.detail
    assert "security mode is ask" in failed.data.error.detail
    [ended] = turn_ended(proposal.turn_id)(events)  # exactly once
    assert "approval_not_justified" in (ended.data.reply or ""), ended.data
    [violation] = only(events, AuditViolation)
    assert violation.data.kind == "unjustified_approval"
    assert violation.data.invocation_id == proposal.data.invocation_id


async def test_the_turn_runner_cannot_answer_a_prompt_for_a_person(
    secure_server: SecureServer, tmp: Path
) -> None:
    session = "door-1"
    async with deployment(secure_server, tmp, *WRITE, security_mode="ask") as users:
        events = await waiting_for_a_person(users, session)
        [asked] = only(events, InteractionRequested)
        [proposal] = only(events, ToolInvocationProposed)
        runner, operator = users["turn-runner"], users["operator"]
        answer = answer_command(session, asked.data.interaction_id, "approve")

        # the people's subject: refused by the server, nothing stored
        errors: list[Exception] = []
        runner.nc._error_cb = _collect(errors)
        before = (await operator.js.stream_info("TS_INBOUND")).state.last_seq
        subject = SUBJECTS.inbound(session)
        with pytest.raises(Exception):  # noqa: B017 - refused: no ack (timeout) or an error
            key = {"Nats-Msg-Id": "forged-answer-1"}
            await runner.js.publish(subject, orjson.dumps(answer), headers=key, timeout=1.0)
        await asyncio.sleep(0.2)
        assert (await operator.js.stream_info("TS_INBOUND")).state.last_seq == before
        assert any("permissions violation" in str(e).lower() for e in errors), errors
        assert any(subject in str(e) for e in errors), errors

        # the runtime's own subject: stored, then rejected by the gateway
        answer["idempotencyKey"] = "forged-answer-2"
        ack = await runner.js.publish(
            SUBJECTS.inbound_agent(session),
            orjson.dumps(answer),
            headers={"Nats-Msg-Id": "forged-answer-2"},
        )
        events = await wait_for(operator, session, lambda es: only(es, InputRejected))
        [rejected] = only(events, InputRejected)
        assert rejected.data.kind == "not_permitted" and rejected.data.inbound_seq == ack.seq
        assert "'answer'" in rejected.data.reason and ".agent" in rejected.data.reason
        await asyncio.sleep(0.5)  # an answer taken would have run the tool by now
        events = await events_of(operator, session)
        assert not only(events, InteractionAnswered) and runs(tmp) == []

        # the person's own answer, on the people's subject, runs it
        await publish_command(
            users["client"], session, answer_command(session, asked.data.interaction_id, "approve")
        )
        events = await wait_for(operator, session, turn_ended(proposal.turn_id), 30)
    assert runs(tmp) == [proposal.data.invocation_id]
    assert len(only(events, InteractionAnswered)) == 1
    assert len(only(events, ToolInvocationSucceeded)) == 1
    assert not only(events, AuditViolation)


async def test_an_allowlist_rule_runs_the_tool_with_no_person(
    secure_server: SecureServer, tmp: Path
) -> None:
    session = "allow-1"
    allowlist = [{"tool": "slow_write", "args": {"ms": "1"}}]
    async with deployment(
        secure_server, tmp, *WRITE, security_mode="allowlist", allowlist=allowlist
    ) as users:
        await publish_command(users["client"], session, message_command(session, "write it"))
        events = await wait_for(users["operator"], session, lambda es: only(es, TurnEnded), 30)
    [succeeded] = only(events, ToolInvocationSucceeded)
    assert runs(tmp) == [succeeded.data.invocation_id]
    assert not only(events, InteractionRequested)


async def test_a_workflow_stage_s_allowed_tools_run_and_a_granted_one_too(
    secure_server: SecureServer, tmp: Path
) -> None:
    """In ask mode, the example workflow's stages call their allowed tools with no person,
    and `grep`, outside its stage's, once a person grants it."""
    session = "flow-1"
    async with deployment(secure_server, tmp, security_mode="ask", workflows=EXAMPLES) as users:
        client, operator = users["client"], users["operator"]
        command = attach_command(session, "review-and-implement", {"task": "document it"})
        await publish_command(client, session, command)
        [asked] = grant_asked(await wait_for(operator, session, grant_asked, 30))
        grant = answer_command(session, asked.data.interaction_id, "approve")
        await publish_command(client, session, grant)
        events = await wait_for(operator, session, exited, 60)
    [end] = only(events, WorkflowExit)
    assert end.data.status == "completed", end.data
    assert not only(events, ToolInvocationFailed), only(events, ToolInvocationFailed)
    assert (tmp / "workspace" / "NOTES.md").read_text().startswith("# Notes")
    assert not only(events, AuditViolation)
