"""Whether the log justifies running a tool call (`core.justification`): from facts the
turn-runner cannot append, never from its own approval, mode or stage envelope."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import pytest

from tests.unit.factories import T0
from tests.unit.test_workflow_run import stage, workflow
from turnstream.core.approval import AllowRule, ApprovalConfig
from turnstream.core.events import (
    Envelope,
    EventBase,
    InteractionAnswered,
    InteractionAnsweredData,
    InteractionRequested,
    InteractionRequestedData,
    Sender,
    SessionConfigured,
    SessionConfiguredData,
    StageGranted,
    StageGrantedData,
    WorkflowAttached,
    WorkflowAttachedData,
    stamp,
)
from turnstream.core.justification import (
    Grounds,
    Justified,
    ToolCall,
    Unjustified,
    by_rules,
    fold,
    justify,
)
from turnstream.core.workflow.definition import Step

ENVELOPE = Envelope("s1", "c1", "t1", "tr", "k")
ANA = Sender(kind="human", id="ana")
WRITE = ToolCall("inv1", "write_file", {"path": "notes.txt", "text": "hi"})
ASK = ApprovalConfig(default_mode="ask")
_ids = itertools.count(1)


def event(cls: type[EventBase], data: Any, source: str) -> Any:
    return stamp(
        cls, data, ENVELOPE, event_id=f"e{next(_ids)}", time=T0, source=source, causation_id=None
    )


def configured(mode: str | None) -> SessionConfigured:
    data = SessionConfiguredData(agent="a", security_mode=mode, idempotency_key="k")  # type: ignore[arg-type]
    return event(SessionConfigured, data, "gateway/1")


def attached(*allowed: str) -> WorkflowAttached:
    definition = workflow(Step(("plan",)), stages=[stage("plan", allowed_tools=allowed)])
    data = WorkflowAttachedData(
        run_id="r1",
        workflow="wf",
        definition=definition.to_dict(),
        sender=ANA,
        idempotency_key="k",
        inbound_seq=1,
    )
    return event(WorkflowAttached, data, "gateway/1")


def prompt(
    call: ToolCall = WRITE, interaction: str = "i1", kind: str = "tool", **args: Any
) -> InteractionRequested:
    data = InteractionRequestedData(
        interaction_id=interaction,
        invocation_id=call.invocation_id,
        tool=call.tool,
        args=args or dict(call.args),
        deadline=T0 + timedelta(minutes=5),
        prompt="allow?",
        kind=kind,  # type: ignore[arg-type]
    )
    return event(InteractionRequested, data, "approval/1")


def answer(decision: str = "approve", interaction: str = "i1") -> InteractionAnswered:
    data = InteractionAnsweredData(
        interaction_id=interaction,
        decision=decision,  # type: ignore[arg-type]
        sender=ANA,
        idempotency_key=f"ans-{next(_ids)}",
        inbound_seq=1,
    )
    return event(InteractionAnswered, data, "gateway/1")


def granted(call: ToolCall = WRITE) -> StageGranted:
    data = StageGrantedData(
        stage="plan",
        stage_execution_id="x1",
        tool=call.tool,
        invocation_id=call.invocation_id,
        answered_by=ANA,
    )
    return event(StageGranted, data, "approval/1")


def verdict(*facts: Any, config: ApprovalConfig = ASK, call: ToolCall = WRITE) -> Any:
    return justify(call, fold(Grounds(), facts), config)


@pytest.mark.parametrize(
    ("default", "profile", "authority"),
    [
        ("auto", None, "mode"),
        ("ask", "auto", "mode"),
        ("allowlist", None, "allowlist"),
    ],
)
def test_the_rules_alone_justify_auto_and_a_matching_allowlist_rule(
    default: str, profile: str | None, authority: str
) -> None:
    config = ApprovalConfig(default, (AllowRule("write_file", {"path": "notes*"}),))  # type: ignore[arg-type]
    facts = [configured(profile)] if profile else []
    grounds = fold(Grounds(), facts)
    ruled = by_rules(WRITE, grounds, config)
    assert isinstance(ruled, Justified) and ruled.authority == authority
    assert justify(WRITE, grounds, config) == ruled


def test_the_profile_s_mode_wins_over_the_deployment_default() -> None:
    """A profile's ask in a deployment whose default is auto: a person decides."""
    auto = ApprovalConfig(default_mode="auto")
    assert by_rules(WRITE, fold(Grounds(), [configured("ask")]), auto) is None
    found = verdict(configured("ask"), config=auto)
    assert isinstance(found, Unjustified)
    assert "security mode is ask (its agent profile's)" in found.reason


@pytest.mark.parametrize("mode", ["ask", "deny"])
def test_ask_and_deny_with_nothing_else_do_not_justify(mode: str) -> None:
    found = verdict(config=ApprovalConfig(default_mode=mode))  # type: ignore[arg-type]
    assert isinstance(found, Unjustified)
    assert "not justified by the log" in found.reason
    assert f"security mode is {mode} (the deployment's default)" in found.reason
    assert "no person was asked" in found.reason


def test_an_allowlist_rule_is_matched_against_the_arguments_the_call_runs_with() -> None:
    config = ApprovalConfig("allowlist", (AllowRule("write_file", {"path": "notes*"}),))
    other = ToolCall("inv1", "write_file", {"path": "/etc/passwd", "text": "x"})
    found = verdict(config=config, call=other)
    assert isinstance(found, Unjustified) and "no rule matches" in found.reason


def test_a_person_s_approval_of_this_very_call_justifies_it() -> None:
    found = verdict(prompt(), answer("approve"))
    assert found == Justified("interaction", "human ana approved it (i1)")


@pytest.mark.parametrize(
    ("facts", "why"),
    [
        (lambda: [prompt()], "no person has answered"),
        (lambda: [prompt(), answer("deny")], "the person denied it"),
        # the first answer counts, as for the approval service
        (lambda: [prompt(), answer("deny"), answer("approve")], "the person denied it"),
        (lambda: [answer("approve")], "no person was asked"),
        (lambda: [prompt(path="notes.txt", text="harmless"), answer()], "other arguments"),
        (lambda: [prompt(ToolCall("inv2", "write_file", WRITE.args)), answer()], "no person"),
        (lambda: [prompt(interaction="i1"), answer(interaction="i2")], "no person has answered"),
    ],
)
def test_anything_short_of_that_does_not(facts: Any, why: str) -> None:
    found = verdict(*facts())
    assert isinstance(found, Unjustified) and why in found.reason, found


def test_a_stage_s_allowed_tools_come_from_the_attached_definition() -> None:
    found = verdict(attached("read_file", "write_file"))
    assert isinstance(found, Justified) and found.authority == "workflow"
    assert isinstance(verdict(attached("read_file")), Unjustified)


def test_a_stage_grant_needs_the_answer_and_the_stage_granted() -> None:
    grant = prompt(kind="grantStageTool")
    found = verdict(attached("read_file"), grant, answer())
    assert isinstance(found, Unjustified) and "no StageGranted" in found.reason
    found = verdict(attached("read_file"), grant, answer(), granted())
    assert isinstance(found, Justified) and found.authority == "interaction"


def test_what_a_settled_call_kept_is_forgotten() -> None:
    grounds = fold(Grounds(), [configured("ask"), prompt(), answer(), granted()])
    grounds.settled(WRITE.invocation_id)
    assert grounds.prompts == {} and grounds.answers == {} and grounds.granted == {}
    assert grounds.mode == "ask"
