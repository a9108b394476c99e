"""Workflows over a real nats-server: attach, stages as turns, grants, fan-out, rejection."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import (
    events_of,
    only,
    running_services,
    settings_for,
    wait_for,
)
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.client import answer_command, attach_command, publish_command
from turnstream.core.events import (
    Event,
    InputRejected,
    InteractionRequested,
    ProviderRequestCompleted,
    StageAssertOutcome,
    StageCancelled,
    StageCheckGateResult,
    StageCompletionChecked,
    StageEntered,
    StageGranted,
    ToolCallApproved,
    ToolCallDenied,
    ToolCallModeInvoked,
    TurnEnded,
    WorkflowExit,
)
from turnstream.core.session import SessionState, fold
from turnstream.core.workflow.view import stage_rows
from turnstream.hooks import HookCall, HookRegistry, HookReply, HookSpec

EXAMPLES = Path(__file__).resolve().parents[2] / "workflows"


def exited(events: list[Event]) -> bool:
    return bool(only(events, WorkflowExit))


def grant_asked(events: list[Event]) -> list[InteractionRequested]:
    return [e for e in only(events, InteractionRequested) if e.data.kind == "grantStageTool"]


def one_terminal_per_turn(events: list[Event]) -> None:
    started = {e.turn_id for e in events if e.type == "SessionTurnStart"}
    ended = Counter(e.turn_id for e in only(events, TurnEnded))
    assert started and all(ended[t] == 1 for t in started), ended


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    (tmp_path / "workspace").mkdir()
    return tmp_path


@pytest.mark.parametrize("decision", ["approve", "deny"])
async def test_the_example_workflow_runs_end_to_end_with_a_grant_prompt(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path, decision: str
) -> None:
    session = f"wf-{decision}"
    settings = settings_for(nats_server, tmp, workflows=EXAMPLES, security_mode="ask")
    async with running_services(settings, bus):
        command = attach_command(session, "review-and-implement", {"task": "document it"})
        await publish_command(bus, session, command)
        events = await wait_for(bus, session, grant_asked)
        [asked] = grant_asked(events)
        assert asked.data.tool == "grep"
        await publish_command(
            bus, session, answer_command(session, asked.data.interaction_id, decision)
        )
        events = await wait_for(bus, session, exited)
    [end] = only(events, WorkflowExit)
    assert end.data.status == "completed", end.data
    assert (tmp / "workspace" / "NOTES.md").read_text().startswith("# Notes")
    # in-envelope calls are the workflow's to approve: the `ask` mode gate never ran
    assert only(events, ToolCallModeInvoked) == []
    authorities = {e.data.authority for e in only(events, ToolCallApproved)}
    assert authorities == {"workflow"}
    if decision == "approve":
        assert [e.data.tool for e in only(events, StageGranted)] == ["grep"]
    else:
        [denied] = only(events, ToolCallDenied)
        assert denied.data.reason.startswith("GrantDenied")
    outcomes = [e.data.outcome for e in only(events, StageCompletionChecked)]
    assert "no_call" in outcomes  # review-tests answered in prose first and was steered
    one_terminal_per_turn(events)
    state = fold(SessionState.of(session), events)
    assert state.chat.history == ()  # stage transcripts stay out of session history
    assert state.workflow is not None
    rows = stage_rows(state.workflow)
    assert [(r.stage, r.verdict) for r in rows] == [
        ("plan", "ok"),
        ("review-risks", "ok"),
        ("review-tests", "ok"),
        ("summarize", "ok"),
        ("implement", "ok"),
    ]
    siblings = [e for e in only(events, StageEntered) if e.data.siblings]
    assert {e.data.stage for e in siblings} == {"review-risks", "review-tests"}


async def test_attaching_a_workflow_that_does_not_load_is_rejected_with_the_problems(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path
) -> None:
    broken = tmp / "flows" / "broken"
    broken.mkdir(parents=True)
    (broken / "workflow.yaml").write_text("name: broken\nsteps: [only]\n")
    (broken / "only.md").write_text("---\nid: only\nname: Only\n---\nbody\n")
    settings = settings_for(nats_server, tmp, workflows=tmp / "flows")
    async with running_services(settings, bus):
        await publish_command(bus, "wf-bad", attach_command("wf-bad", "broken"))
        await publish_command(bus, "wf-none", attach_command("wf-none", "nope"))
        bad = await wait_for(bus, "wf-bad", lambda es: only(es, TurnEnded))
        none = await wait_for(bus, "wf-none", lambda es: only(es, TurnEnded))
    [rejected] = only(bad, InputRejected)
    assert rejected.data.kind == "workflow_invalid"
    assert any("completionTool" in e for e in rejected.data.errors)
    assert only(bad, TurnEnded)[0].data.failure_class == "invalid_input"
    assert "no workflow 'nope'" in only(none, InputRejected)[0].data.reason


async def test_a_failing_sibling_cancels_the_other_mid_call_and_the_join_never_runs(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path
) -> None:
    flow = tmp / "flows" / "fan"
    flow.mkdir(parents=True)
    (flow / "workflow.yaml").write_text(
        "name: fan\nsteps:\n  - parallel: [fast, slow]\n    join: merge\n"
    )
    for name, cap in (("fast", 1), ("slow", 5), ("merge", 2)):
        (flow / f"{name}.md").write_text(
            f"---\nid: {name}\nname: {name}\nallowedTools: []\ncompletionTool: done_{name}\n"
            "completionSchema: {type: object}\nretryPolicy: {maxAttempts: 1, backoff: none}\n"
            f"turnCap: {cap}\nresolutionPolicy: fail\n---\nYou are {name}.\n"
        )
    script = tmp / "script.yaml"
    script.write_text(
        "replies: [{text: unused}]\n"
        "stages:\n"
        "  fast: [{text: 'no completion from me'}]\n"
        "  slow: [{text: 'thinking very slowly', delay_ms: 800}]\n"
        "  merge: [{tool_calls: [{name: done_merge, arguments: {}}]}]\n"
    )
    settings = settings_for(nats_server, tmp, workflows=tmp / "flows", script=script)
    async with running_services(settings, bus):
        await publish_command(bus, "wf-fan", attach_command("wf-fan", "fan"))
        events = await wait_for(bus, "wf-fan", exited)
        await asyncio.sleep(1.2)  # the cancelled call would have answered by now
        events = await events_of(bus, "wf-fan")
    [end] = only(events, WorkflowExit)
    assert end.data.status == "failed" and end.data.failure == "ParallelSiblingFailure"
    [cancelled] = only(events, StageCancelled)
    assert cancelled.data.stage == "slow"
    slow_turn = cancelled.data.stage_execution_id
    assert not [e for e in only(events, ProviderRequestCompleted) if e.turn_id == slow_turn]
    assert {e.data.stage for e in only(events, StageEntered)} == {"fast", "slow"}
    one_terminal_per_turn(events)


async def test_gate_and_assert_hooks_defer_then_pass_and_retry_then_accept(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path
) -> None:
    flow = tmp / "flows" / "checked"
    flow.mkdir(parents=True)
    (flow / "workflow.yaml").write_text("name: checked\nsteps: [draft]\n")
    (flow / "draft.md").write_text(
        "---\nid: draft\nname: Draft\nallowedTools: []\ncompletionTool: submit_draft\n"
        "completionSchema: {type: object, required: [text]}\n"
        "retryPolicy: {maxAttempts: 3, backoff: none}\nturnCap: 4\n"
        "resolutionPolicy: retry-later\n---\nDraft it.\n"
    )
    script = tmp / "script.yaml"
    script.write_text(
        "replies: [{text: unused}]\n"
        "stages:\n"
        "  draft:\n"
        "    - {tool_calls: [{name: submit_draft, arguments: {text: v1}}]}\n"
        "    - {tool_calls: [{name: submit_draft, arguments: {text: v2}}]}\n"
    )
    seen: list[dict[str, Any]] = []
    gate_calls = 0

    async def gate(call: HookCall) -> HookReply:
        nonlocal gate_calls
        gate_calls += 1
        verdict = "defer" if gate_calls == 1 else "pass"
        return HookReply(verdict=verdict, reason="not yet" if verdict == "defer" else None)

    async def asserter(call: HookCall) -> HookReply:
        assert call.text == "draft" and call.result is not None
        seen.append(call.result)
        if call.result["attempt"] < 2:
            return HookReply(verdict="retry", reason="make it longer")
        return HookReply(verdict="ok")

    hooks = HookRegistry(
        [
            (HookSpec(name="ready", stage="CheckGate", kind="guard"), gate),
            (
                HookSpec(name="judge", stage="Assert", kind="guard", workflow_stage="draft"),
                asserter,
            ),
        ]
    )
    settings = settings_for(nats_server, tmp, workflows=tmp / "flows", script=script)
    async with running_services(settings, bus, hooks=hooks):
        await publish_command(bus, "wf-hooks", attach_command("wf-hooks", "checked"))
        events = await wait_for(bus, "wf-hooks", exited)
    gates = [
        (e.data.outcome, e.data.retry_at is not None) for e in only(events, StageCheckGateResult)
    ]
    assert gates == [("defer", True), ("pass", False)]
    asserted = [(e.data.verdict, e.data.asserter) for e in only(events, StageAssertOutcome)]
    assert asserted == [("retry", "judge"), ("ok", "judge")]
    assert [r["parsed"] for r in seen] == [{"text": "v1"}, {"text": "v2"}]
    [end] = only(events, WorkflowExit)
    assert end.data.status == "completed"
    assert end.data.results["draft"].attempt_count == 2
    steering = [e for e in events if e.type == "StagePreFired" and e.data.iteration == 2]
    assert steering  # the retry re-entered Act in the same stage turn
    one_terminal_per_turn(events)
