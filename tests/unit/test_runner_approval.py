"""The turn-runner applies the approval rules in the decision that proposes a call: a
verdict that needs no person is in the same batch as the proposal (no approval-service
hop), with the ids the approval service derives; a call that needs one is left to it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tests.unit.factories import T0, Ids, accepted, ctx, fact, success
from turnstream.approval.app import CONSUMES
from turnstream.bus.contract import StoredEvent
from turnstream.bus.leases import Ownership
from turnstream.bus.memory import InMemoryEventStore
from turnstream.core import approval
from turnstream.core.approval import AllowRule, ApprovalConfig, ApprovalState
from turnstream.core.events import (
    InteractionRequested,
    SessionConfigured,
    SessionConfiguredData,
    StageEnvelope,
    ToolCallApproved,
    ToolCallApprovedData,
    ToolCallDenied,
    ToolCallModeInvoked,
    ToolInvocationProposed,
)
from turnstream.core.inputs import Fact, Tick
from turnstream.core.session import SessionState, fold
from turnstream.core.session.decider import ProviderDone, decide_session
from turnstream.core.subjects import Subjects
from turnstream.core.turn import ToolCall, ToolInfo, TurnConfig
from turnstream.runtime.mailbox import Delivered

TOOLS = (
    ToolInfo("read_file", "read", {"type": "object"}, True, True, 5.0),
    ToolInfo("write_file", "write", {"type": "object"}, False, False, 7.0),
)


def config(mode: str = "auto", *rules: AllowRule) -> TurnConfig:
    return TurnConfig(tools=TOOLS, approval=ApprovalConfig(mode, rules))  # type: ignore[arg-type]


class Runner:
    """The session decider as the runner's actor drives it: one input, one decision."""

    def __init__(self, cfg: TurnConfig, *before: object) -> None:
        self.cfg, self.c = cfg, ctx(Ids())
        self.state = fold(SessionState.of("s1"), [*before, accepted(1, "do it")])  # type: ignore[list-item]
        self.batches: list[list] = []
        self.input(Tick())

    def input(self, item: object) -> list:
        decision = decide_session(self.state, item, self.cfg, self.c)  # type: ignore[arg-type]
        self.state = decision.state
        self.batches.append(list(decision.events))
        return self.batches[-1]

    def model_calls(self, *calls: tuple[str, dict]) -> list:
        tool_calls = tuple(ToolCall(f"c{i}", n, a) for i, (n, a) in enumerate(calls))
        reply = replace(success("", "tool_use"), tool_calls=tool_calls)
        return self.input(ProviderDone("turn1", reply))


def kinds(events) -> list[str]:
    return [e.type for e in events]


def judged_part(batch) -> list[str]:
    """The kinds from the first proposal on."""
    start = next(i for i, e in enumerate(batch) if isinstance(e, ToolInvocationProposed))
    return kinds(batch[start:])


def test_an_auto_call_is_proposed_judged_and_requested_in_one_decision() -> None:
    r = Runner(config("auto"))
    batch = r.model_calls(("write_file", {"path": "a"}))
    assert judged_part(batch) == [
        "ToolInvocationProposed",
        "ToolCallModeInvoked",
        "ToolCallApproved",
        "ToolInvocationRequested",
    ]
    proposed, invoked, approved, _ = batch[-4:]
    assert invoked.data.mode == "auto" and invoked.data.verdict == "approve"
    assert approved.data.authority == "mode"
    assert {e.source for e in batch} == {"test/1"}  # the runner's own name: it decided
    assert invoked.causation_id == proposed.id and approved.causation_id == invoked.id


def test_the_runner_s_verdict_ids_are_the_approval_service_s() -> None:
    r = Runner(config("auto"))
    batch = r.model_calls(("write_file", {"path": "a"}), ("read_file", {"path": "b"}))
    proposals = [e for e in batch if isinstance(e, ToolInvocationProposed)]
    theirs = approval.decide_approval(
        approval.fold(ApprovalState("s1"), proposals), ApprovalConfig("auto"), T0, "approval/1"
    )
    ours = [e for e in batch if isinstance(e, ToolCallModeInvoked | ToolCallApproved)]
    assert sorted(e.id for e in ours) == sorted(e.id for e in theirs)
    dump = {e.id: e.model_dump(exclude={"source"}) for e in theirs}
    assert all(e.model_dump(exclude={"source"}) == dump[e.id] for e in ours)


def test_deny_mode_denies_in_the_runner_and_nothing_is_requested() -> None:
    r = Runner(config("deny"))
    batch = r.model_calls(("write_file", {"path": "a"}))
    assert judged_part(batch)[:3] == [
        "ToolInvocationProposed",
        "ToolCallModeInvoked",
        "ToolCallDenied",
    ]
    assert "ToolInvocationRequested" not in kinds(batch)
    denied = next(e for e in batch if isinstance(e, ToolCallDenied))
    assert denied.data.authority == "mode"


def test_an_allowlist_hit_runs_at_once_and_a_miss_is_left_to_the_approval_service() -> None:
    r = Runner(config("allowlist", AllowRule("write_file", {"path": "notes/*"})))
    batch = r.model_calls(("write_file", {"path": "notes/a"}), ("write_file", {"path": "src/b"}))
    verdicts = [e for e in batch if isinstance(e, ToolCallModeInvoked)]
    assert [v.data.verdict for v in verdicts] == ["approve", "ask"]
    [approved] = [e for e in batch if isinstance(e, ToolCallApproved)]
    assert approved.data.authority == "allowlist"
    assert kinds(batch)[-1] == "ToolInvocationRequested"  # the hit runs; the miss waits
    assert approval.needs_person(verdicts[1]) and not approval.needs_person(verdicts[0])
    assert r.input(Tick()) == []  # nothing more until a person answers


def test_an_ask_call_waits_for_the_approval_service_which_prompts_and_its_answer_runs_it() -> None:
    r = Runner(config("ask"))
    batch = r.model_calls(("write_file", {"path": "a"}))
    assert judged_part(batch) == ["ToolInvocationProposed", "ToolCallModeInvoked"]
    proposed, invoked = batch[-2:]
    assert invoked.data.verdict == "ask"
    # the approval service: it skips the proposal, and asks on the verdict
    service = ApprovalConfig("ask")
    state = ApprovalState("s1")
    for event in (proposed, invoked):
        decided = approval.decide_input(state, Fact(event), service, T0, "approval/1")
        state = decided.state
    [asked] = decided.events
    assert isinstance(asked, InteractionRequested) and asked.data.invocation_id == (
        invoked.data.invocation_id
    )
    answer = fact(
        ToolCallApproved,
        ToolCallApprovedData,
        invocation_id=invoked.data.invocation_id,
        authority="interaction",
    )
    assert kinds(r.input(Fact(answer))) == ["ToolInvocationRequested"]


def test_the_approval_service_leaves_what_the_runner_judges() -> None:
    r = Runner(config("auto"))
    batch = r.model_calls(("write_file", {"path": "a"}))
    proposed, invoked = batch[-4], batch[-3]
    assert not approval.needs_person(proposed) and not approval.needs_person(invoked)
    # even folded (a session loaded for another reason), a proposal is not judged there
    state = approval.fold(ApprovalState("s1"), [proposed])
    assert approval.decide_input(state, Tick(), ApprovalConfig("auto"), T0, "a/1").events == ()


def test_the_mode_is_fixed_at_the_session_s_first_proposal() -> None:
    first = Runner(config("auto"))
    [earlier] = [
        e for e in first.model_calls(("write_file", {})) if e.type == "ToolCallModeInvoked"
    ]
    assert first.state.security_mode == "auto"
    earlier = earlier.model_copy(update={"turn_id": "turn0"})  # an earlier turn's proposal
    r = Runner(config("deny"), earlier)  # the deployment's default changed since
    batch = r.model_calls(("write_file", {"path": "b"}))
    [invoked] = [e for e in batch if isinstance(e, ToolCallModeInvoked)]
    assert invoked.data.mode == "auto" and kinds(batch)[-1] == "ToolInvocationRequested"


def test_the_agent_s_mode_applies_until_a_proposal_fixes_it() -> None:
    agent = fact(
        SessionConfigured,
        SessionConfiguredData,
        agent="careful",
        security_mode="deny",
        idempotency_key="k",
    )
    r = Runner(config("auto"), agent)
    batch = r.model_calls(("write_file", {"path": "a"}))
    [invoked] = [e for e in batch if isinstance(e, ToolCallModeInvoked)]
    assert invoked.data.mode == "deny"
    assert any(isinstance(e, ToolCallDenied) for e in batch)


def test_a_proposal_whose_verdict_was_not_stored_is_judged_on_the_next_decision() -> None:
    r = Runner(config("auto"))
    batch = r.model_calls(("write_file", {"path": "a"}))
    # a crash stored the batch up to the proposal: the runner reloads and decides again
    upto = next(i for i, e in enumerate(batch) if isinstance(e, ToolInvocationProposed)) + 1
    r.state = fold(fold(SessionState.of("s1"), [accepted(1)]), [*r.batches[0], *batch[:upto]])
    again = r.input(Tick())
    assert kinds(again) == ["ToolCallModeInvoked", "ToolCallApproved", "ToolInvocationRequested"]
    assert [e.id for e in again[:2]] == [e.id for e in batch[upto : upto + 2]]  # log dedup


def test_a_redelivered_verdict_changes_nothing() -> None:
    r = Runner(config("auto"))
    batch = r.model_calls(("write_file", {"path": "a"}))
    for event in batch[-3:-1]:
        assert r.input(Fact(event)) == []


def test_a_stage_call_inside_its_envelope_is_approved_by_the_workflow_outside_asks_a_grant() -> (
    None
):
    envelope = StageEnvelope(
        run_id="r", stage="plan", stage_execution_id="x", allowed_tools=["read_file"]
    )
    proposal = fact(ToolInvocationProposed, ToolInvocationProposed.model_fields["data"].annotation,
                    invocation_id="i1", call_id="c1", tool="read_file", args={}, index=0,
                    iteration=1, read_only=True, envelope=envelope)  # fmt: skip
    [approved] = approval.judge(approval.Call.of(proposal), "deny", ApprovalConfig(), T0, "r/1")
    assert isinstance(approved, ToolCallApproved) and approved.data.authority == "workflow"
    outside = proposal.model_copy(
        update={"data": proposal.data.model_copy(update={"tool": "write_file"})}
    )
    assert approval.judge(approval.Call.of(outside), "auto", ApprovalConfig(), T0, "r/1") == []
    assert approval.needs_person(outside) and not approval.needs_person(proposal)


class Counted(InMemoryEventStore):
    """The log, counting the session reads (a load) the approval service makes."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    async def read_session(self, session_id: str, **how: Any) -> list[StoredEvent]:
        self.reads += 1
        return await super().read_session(session_id, **how)


class Msg:
    def __init__(self) -> None:
        self.acked = False

    async def ack(self) -> None:
        self.acked = True


class Leases:
    """The approval leases of one instance that gets every session it asks for."""

    owner = "approval-test"

    def __init__(self) -> None:
        self.ensured = 0
        self.held: set[str] = set()

    async def ensure(self, session_id: str) -> Ownership:
        self.ensured += 1
        new = session_id not in self.held
        self.held.add(session_id)
        return Ownership.NEW if new else Ownership.KEPT

    def holds(self, session_id: str) -> bool:
        return session_id in self.held


async def approval_service_handles(cfg: TurnConfig, *, loaded: bool = False):
    """A one-call turn's batch in the log, each event delivered to the approval service's
    actor of the session as its consumer would: what it read and appended."""
    from types import SimpleNamespace

    from turnstream.approval.app import ApprovalActor, ApprovalService

    batch = Runner(cfg).model_calls(("write_file", {"path": "a"}))
    store = Counted()
    await store.append("s1", batch)
    bus = SimpleNamespace(store=store, js=None, subjects=Subjects("ts"))
    service = ApprovalService(bus, ApprovalConfig("ask"), clock=lambda: T0)  # type: ignore[arg-type]
    service.leases = Leases()  # type: ignore[assignment]
    actor = ApprovalActor(service, "s1")
    actor.loaded = loaded  # a session loaded before (e.g. for an earlier prompt)
    msgs = []
    for stored in store.log:
        if stored.event.type in CONSUMES:
            msgs.append(Msg())
            await actor.handle(Delivered(msgs[-1], stored.seq, stored.event))
    if actor.timer is not None:
        actor.timer.cancel()
    assert all(m.acked for m in msgs)
    return store, actor


async def test_the_approval_service_acks_a_runner_decided_call_unread() -> None:
    store, actor = await approval_service_handles(config("auto"))
    assert store.reads == 0 and not actor.loaded  # no session load, no log read
    assert actor.service.leases.ensured == 0  # type: ignore[attr-defined] # nor its lease
    assert {s.event.type for s in store.log} & {"InteractionRequested"} == set()


async def test_the_approval_service_asks_on_an_ask_verdict_even_for_a_session_it_had_loaded() -> (
    None
):
    for loaded in (False, True):
        store, actor = await approval_service_handles(config("ask"), loaded=loaded)
        assert store.reads == 1 and actor.loaded
        assert actor.service.leases.ensured >= 1  # type: ignore[attr-defined]
        [asked] = [s.event for s in store.log if isinstance(s.event, InteractionRequested)]
        assert asked.source.startswith("approval")
