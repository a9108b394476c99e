"""The approval decider: mode gate, allowlist, serialized prompts, answers, deadlines."""

from __future__ import annotations

from datetime import timedelta

from tests.unit.factories import T0, fact
from turnstream.core.approval import (
    AllowRule,
    ApprovalConfig,
    ApprovalState,
    decide_approval,
    fold,
    next_deadline,
)
from turnstream.core.events import (
    InteractionAnswered,
    InteractionAnsweredData,
    InteractionRequested,
    Sender,
    StageEnvelope,
    StageGranted,
    ToolCallApproved,
    ToolCallDenied,
    ToolCallModeInvoked,
    ToolInvocationProposed,
    ToolInvocationProposedData,
    TurnEnded,
    TurnEndedData,
)

HUMAN = Sender(kind="human", id="ana")


def proposed(n: int, tool: str = "write_file", turn: str = "t1", **args) -> ToolInvocationProposed:
    return ToolInvocationProposed(
        id=f"p{n}",
        time=T0,
        session_id="s1",
        chat_id="c1",
        turn_id=turn,
        trace_id="tr",
        correlation_id="k",
        source="turn-runner/1",
        data=ToolInvocationProposedData(
            invocation_id=f"inv{n}",
            call_id=f"call{n}",
            tool=tool,
            args=args or {"path": f"f{n}.txt"},
            index=n,
            iteration=1,
            read_only=tool != "write_file",
        ),
    )


def answered(interaction_id: str, decision: str = "approve", n: int = 1) -> InteractionAnswered:
    return InteractionAnswered(
        id=f"a{n}",
        time=T0,
        session_id="s1",
        chat_id="c1",
        trace_id="tr",
        correlation_id="k",
        source="gateway/1",
        data=InteractionAnsweredData(
            interaction_id=interaction_id,
            decision=decision,  # type: ignore[arg-type]
            sender=HUMAN,
            idempotency_key=f"ans{n}",
            inbound_seq=n,
        ),
    )


class Approvals:
    def __init__(self, config: ApprovalConfig) -> None:
        self.config = config
        self.state = ApprovalState("s1")
        self.log: list = []

    def feed(self, *events, at=T0):
        self.state = fold(self.state, list(events))
        out = decide_approval(self.state, self.config, at, "approval/1")
        self.state = fold(self.state, out)
        self.log += out
        return out


def kinds(events) -> list[str]:
    return [e.type for e in events]


def test_auto_mode_approves_and_records_the_mode() -> None:
    a = Approvals(ApprovalConfig(default_mode="auto"))
    out = a.feed(proposed(1))
    assert kinds(out) == ["ToolCallModeInvoked", "ToolCallApproved"]
    assert out[0].data.mode == "auto" and out[0].data.verdict == "approve"
    assert out[1].data.authority == "mode" and out[1].turn_id == "t1"
    assert out[1].causation_id == out[0].id and out[0].causation_id == "p1"


def test_deny_mode_denies_with_a_reason() -> None:
    out = Approvals(ApprovalConfig(default_mode="deny")).feed(proposed(1))
    assert kinds(out) == ["ToolCallModeInvoked", "ToolCallDenied"]
    assert isinstance(out[1], ToolCallDenied) and "deny" in out[1].data.reason


def test_allowlist_approves_matches_and_asks_on_a_miss() -> None:
    rules = (AllowRule("read_*"), AllowRule("write_file", {"path": "notes/*"}))
    a = Approvals(ApprovalConfig(default_mode="allowlist", allowlist=rules))
    assert kinds(a.feed(proposed(1, "read_file"))) == ["ToolCallModeInvoked", "ToolCallApproved"]
    hit = a.feed(proposed(2, "write_file", path="notes/a.md"))
    assert hit[-1].data.authority == "allowlist"
    miss = a.feed(proposed(3, "write_file", path="src/a.py"))
    assert kinds(miss) == ["ToolCallModeInvoked", "InteractionRequested"]


def test_ask_serializes_prompts_in_call_order() -> None:
    a = Approvals(ApprovalConfig(default_mode="ask", answer_timeout_s=60))
    out = a.feed(proposed(1), proposed(2))
    asks = [e for e in out if isinstance(e, InteractionRequested)]
    assert [e.data.invocation_id for e in asks] == ["inv1"]  # one open prompt at a time
    assert asks[0].data.deadline == T0 + timedelta(seconds=60)
    assert "write_file" in asks[0].data.prompt
    assert next_deadline(a.state) == T0 + timedelta(seconds=60)
    out = a.feed(answered(asks[0].data.interaction_id, "approve"))
    assert kinds(out) == ["ToolCallApproved", "InteractionRequested"]
    assert out[0].data.authority == "interaction" and out[0].data.answered_by == HUMAN
    assert out[1].data.invocation_id == "inv2"
    out = a.feed(answered(out[1].data.interaction_id, "deny", n=2))
    assert kinds(out) == ["ToolCallDenied"] and "ana" in out[0].data.reason
    assert next_deadline(a.state) is None


def test_an_unanswered_prompt_is_denied_at_its_deadline() -> None:
    a = Approvals(ApprovalConfig(default_mode="ask", answer_timeout_s=30))
    a.feed(proposed(1))
    assert a.feed(at=T0 + timedelta(seconds=29)) == []
    out = a.feed(at=T0 + timedelta(seconds=30))
    assert kinds(out) == ["ToolCallDenied"]
    assert out[0].data.timed_out and "deadline" in out[0].data.reason


def test_the_mode_is_fixed_by_the_session_first_proposal() -> None:
    a = Approvals(ApprovalConfig(default_mode="auto"))
    a.feed(proposed(1))
    a.config = ApprovalConfig(default_mode="deny")  # the deployment default changed
    assert isinstance(a.feed(proposed(2))[-1], ToolCallApproved)


def test_replaying_the_log_gives_the_same_decisions_and_ids() -> None:
    a = Approvals(ApprovalConfig(default_mode="ask"))
    a.feed(proposed(1))
    replayed = fold(ApprovalState("s1"), [proposed(1), *a.log])
    assert decide_approval(replayed, a.config, T0, "approval/2") == []
    # a second decider seeing the same proposal derives the same event ids (log dedup)
    again = decide_approval(fold(ApprovalState("s1"), [proposed(1)]), a.config, T0, "approval/2")
    assert [e.id for e in again] == [e.id for e in a.log]


def test_unknown_tools_and_stale_answers_are_ignored() -> None:
    a = Approvals(ApprovalConfig(default_mode="ask"))
    unknown = proposed(1, "nope")
    unknown = unknown.model_copy(update={"data": unknown.data.model_copy(update={"known": False})})
    assert a.feed(unknown) == []
    a.feed(proposed(2))
    assert a.feed(answered("not-an-open-prompt")) == []
    assert isinstance(a.log[0], ToolCallModeInvoked)


def in_stage(n: int, tool: str, turn: str = "stage1") -> ToolInvocationProposed:
    event = proposed(n, tool, turn)
    envelope = StageEnvelope(
        run_id="r1", stage="plan", stage_execution_id=turn, allowed_tools=["read_file"]
    )
    return event.model_copy(update={"data": event.data.model_copy(update={"envelope": envelope})})


def test_a_call_inside_the_stage_envelope_is_approved_by_the_workflow_not_the_mode() -> None:
    state = fold(ApprovalState("s1"), [in_stage(1, "read_file")])
    events = decide_approval(state, ApprovalConfig(default_mode="deny"), T0, "approval/1")
    assert [type(e) for e in events] == [ToolCallApproved]
    assert events[0].data.authority == "workflow"


def test_a_call_outside_the_envelope_asks_for_one_grant_and_runs_when_granted() -> None:
    state = fold(ApprovalState("s1"), [in_stage(1, "write_file")])
    config = ApprovalConfig(default_mode="auto")  # the mode gate never sees it
    [asked] = decide_approval(state, config, T0, "approval/1")
    assert isinstance(asked, InteractionRequested) and asked.data.kind == "grantStageTool"
    assert "outside its allowed tools" in asked.data.prompt
    state = fold(state, [asked, answered(asked.data.interaction_id)])
    events = decide_approval(state, config, T0, "approval/1")
    assert [type(e) for e in events] == [StageGranted, ToolCallApproved]


def test_a_denied_or_unanswered_grant_is_a_typed_grant_denied_result() -> None:
    config = ApprovalConfig(answer_timeout_s=10)
    state = fold(ApprovalState("s1"), [in_stage(1, "write_file")])
    [asked] = decide_approval(state, config, T0, "approval/1")
    state = fold(state, [asked])
    denied = decide_approval(
        fold(state, [answered(asked.data.interaction_id, "deny")]), config, T0, "a/1"
    )
    assert isinstance(denied[0], ToolCallDenied)
    assert denied[0].data.reason.startswith("GrantDenied: ")
    [late] = decide_approval(state, config, T0 + timedelta(seconds=11), "approval/1")
    assert isinstance(late, ToolCallDenied) and late.data.timed_out
    assert late.data.reason.startswith("GrantDenied: no answer")


def test_proposals_of_parallel_stage_turns_are_all_kept() -> None:
    state = fold(
        ApprovalState("s1"), [in_stage(1, "write_file", "a"), in_stage(2, "read_file", "b")]
    )
    events = decide_approval(state, ApprovalConfig(), T0, "approval/1")
    kinds = sorted(type(e).__name__ for e in events)
    assert kinds == ["InteractionRequested", "ToolCallApproved"]


def turn_ended(turn: str) -> TurnEnded:
    return fact(
        TurnEnded,
        TurnEndedData,
        turn,
        status="failed",
        failure_class="interrupted",
        next_action="again",
    )


def test_the_prompt_of_a_turn_that_ended_does_not_hold_up_the_next_turn() -> None:
    a = Approvals(ApprovalConfig(default_mode="ask"))
    assert kinds(a.feed(proposed(1, turn="t1"))) == ["ToolCallModeInvoked", "InteractionRequested"]
    a.feed(turn_ended("t1"))  # e.g. a hard interrupt while the prompt was open
    assert next_deadline(a.state) is None
    assert kinds(a.feed(proposed(2, turn="t2"))) == ["ToolCallModeInvoked", "InteractionRequested"]


def test_a_redelivered_proposal_that_was_decided_is_not_judged_again() -> None:
    a = Approvals(ApprovalConfig(default_mode="deny"))
    first = in_stage(1, "write_file", "stage-a")
    [asked] = a.feed(first)
    a.feed(answered(asked.data.interaction_id))
    a.feed(in_stage(2, "read_file", "stage-b"))  # another stage turn proposes meanwhile
    assert a.feed(first) == []  # the redelivery: already granted, nothing more


def test_a_redelivered_proposal_of_a_turn_that_ended_is_not_judged() -> None:
    a = Approvals(ApprovalConfig(default_mode="ask"))
    state = fold(ApprovalState("s1"), [proposed(1, turn="t1"), turn_ended("t1")])
    a.state = state
    assert a.feed(proposed(1, turn="t1")) == []  # e.g. the approval service was down
