"""The workflow run in the pure core: stage lifecycle, completion channel, fan-out, retry."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import orjson

from tests.unit.factories import (
    T0,
    Ids,
    InMemory,
    accepted,
    ctx,
    fact,
    interrupt,
    succeed,
    success,
)
from turnstream.core.events import (
    Event,
    FollowUpQueued,
    Sender,
    SessionTurnStart,
    StageAssertOutcome,
    StageCancelled,
    StageCompletionChecked,
    StageEntered,
    StageExited,
    StageInitFailed,
    ToolCallApproved,
    ToolCallApprovedData,
    ToolInvocationProposed,
    ToolInvocationRequested,
    TurnEnded,
    WorkflowAttached,
    WorkflowAttachedData,
    WorkflowExit,
)
from turnstream.core.inputs import Tick
from turnstream.core.session import SessionState, evolve, state_from_json, state_to_json
from turnstream.core.session.decider import (
    Effect,
    Input,
    ProviderDone,
    Providers,
    WorkflowHookSaid,
    effects_of,
)
from turnstream.core.session.run import next_wakeup, turn_views
from turnstream.core.turn import (
    ChatState,
    Context,
    ProviderSuccess,
    ToolCall,
    ToolInfo,
    TurnConfig,
    compose_request,
)
from turnstream.core.workflow.definition import RetryPolicy, StageDef, Step, WorkflowDef

TOOLS = (
    ToolInfo("read_file", "read", {"type": "object"}, True, True, 5.0),
    ToolInfo("write_file", "write", {"type": "object"}, False, False, 5.0),
)
SCHEMA = {
    "type": "object",
    "required": ["summary"],
    "properties": {"summary": {"type": "string"}},
}


def stage(stage_id: str, body: str = "You are {{stage.name}}.", **more: Any) -> StageDef:
    fields: dict[str, Any] = {
        "id": stage_id,
        "name": stage_id.title(),
        "allowed_tools": ("read_file",),
        "completion_tool": f"submit_{stage_id.replace('-', '_')}",
        "completion_schema": SCHEMA,
        "retry_policy": RetryPolicy(max_attempts=2),
        "turn_cap": 3,
        "resolution_policy": "fail",
        "body": body,
    }
    fields.update(more)
    return StageDef(**fields)


def workflow(*steps: Step, stages: list[StageDef], on_fail: dict[str, str] | None = None):
    return WorkflowDef("wf", steps, {s.id: s for s in stages}, on_fail or {})


class Sim(InMemory):
    """Drives the session as the turn-runner would, answering models by stage."""

    def __init__(self, definition: WorkflowDef, wf_ctx: dict[str, Any] | None = None) -> None:
        super().__init__(SessionState.of("s1"), TurnConfig(tools=TOOLS))
        self.apply(
            [
                WorkflowAttached(
                    id="att1",
                    time=T0,
                    session_id="s1",
                    chat_id="c1",
                    trace_id="t1",
                    correlation_id="k1",
                    source="gateway/1",
                    data=WorkflowAttachedData(
                        run_id="run1",
                        workflow="wf",
                        definition=definition.to_dict(),
                        ctx=wf_ctx or {"task": "fix it"},
                        sender=Sender(kind="human", id="u1"),
                        idempotency_key="k1",
                        inbound_seq=1,
                    ),
                )
            ]
        )
        self.decide()

    @property
    def c(self) -> Context:
        return ctx(self.ids)

    def decide(self, input: Input | None = None) -> None:
        """What the runner does with one input: the session decider's decision."""
        self.run(input or Tick())

    async def perform(self, effects: list[Effect]) -> Input | None:
        """Nothing: the tests answer each stage's model themselves (`answer`)."""
        return None

    def waiting(self) -> dict[str, str]:
        """Stage turns waiting for the model (the calls the decider asks the shell for):
        turn id → stage id."""
        run = self.state.workflow
        assert run is not None
        [providers] = [
            e for e in effects_of(self.state, self.config, T0) if isinstance(e, Providers)
        ]
        out = {}
        for request in providers.calls:
            ex = run.lane_of(request.turn_id)
            if ex is not None:
                out[request.turn_id] = ex.stage_id
        return out

    def request(self, stage_id: str):
        for lane, cfg in turn_views(self.state, self.config):
            if cfg.stage is not None and cfg.stage.stage_id == stage_id:
                return compose_request(lane, cfg)
        raise AssertionError(f"{stage_id} does not wait for the model")

    def answer(self, stage_id: str, reply: ProviderSuccess) -> None:
        turn_id = next(t for t, s in self.waiting().items() if s == stage_id)
        self.decide(ProviderDone(turn_id, reply))

    def of(self, cls: type) -> list[Any]:
        return [e for e in self.log if isinstance(e, cls)]


def complete(tool: str, **payload: Any) -> ProviderSuccess:
    return calls_reply(ToolCall("done1", tool, payload))


def calls_reply(*calls: ToolCall) -> ProviderSuccess:
    return replace(success("", "tool_use"), tool_calls=calls)


def test_sequential_stages_hand_on_their_results_and_the_run_completes() -> None:
    sim = Sim(
        workflow(
            Step(("plan",)),
            Step(("build",)),
            stages=[stage("plan"), stage("build", body="Do: {{ctx.upstream[0].output.summary}}")],
        )
    )
    assert sim.waiting() == {sim.of(StageEntered)[0].data.stage_execution_id: "plan"}
    sim.answer("plan", complete("submit_plan", summary="two steps"))
    assert sim.of(StageExited)[0].data.result.verdict == "ok"
    assert sim.request("build").system == "Do: two steps"
    sim.answer("build", complete("submit_build", summary="built"))
    [end] = sim.of(WorkflowExit)
    assert end.data.status == "completed"
    assert end.data.results["build"].parsed == {"summary": "built"}
    ended = sim.of(TurnEnded)
    assert [e.data.status for e in ended] == ["completed", "completed"]
    assert len({e.turn_id for e in ended}) == 2
    assert sim.state.chat.history == ()  # stage transcripts never join session history


def test_the_stage_manifest_is_its_envelope_plus_the_completion_tool() -> None:
    sim = Sim(workflow(Step(("plan",)), stages=[stage("plan")]))
    request = sim.request("plan")
    assert [t.name for t in request.tools] == ["read_file", "submit_plan"]
    assert request.tools[1].parameters == SCHEMA
    assert request.system == "You are Plan."
    assert request.stage == "plan"


def test_a_schema_failure_goes_back_to_the_model_then_a_valid_call_ends_act() -> None:
    sim = Sim(workflow(Step(("plan",)), stages=[stage("plan")]))
    sim.answer("plan", complete("submit_plan", steps=[]))
    [checked] = sim.of(StageCompletionChecked)
    assert checked.data.outcome == "invalid"
    last = sim.request("plan").messages[-1]
    assert last.role == "tool" and last.is_error and "'summary' is a required" in last.text
    sim.answer("plan", complete("submit_plan", summary="ok now"))
    assert sim.of(StageExited)[0].data.result.parsed == {"summary": "ok now"}


def test_plain_text_gets_a_steering_message() -> None:
    sim = Sim(workflow(Step(("plan",)), stages=[stage("plan")]))
    sim.answer("plan", success("I think we should..."))
    assert sim.of(StageCompletionChecked)[0].data.outcome == "no_call"
    last = sim.request("plan").messages[-1]
    assert last.role == "user" and last.text == "Call submit_plan when you are done."
    sim.answer("plan", complete("submit_plan", summary="s"))
    assert sim.of(WorkflowExit)[0].data.status == "completed"


def test_a_completion_call_with_a_sibling_rejects_the_batch_and_runs_nothing() -> None:
    sim = Sim(workflow(Step(("plan",)), stages=[stage("plan")]))
    sim.answer(
        "plan",
        calls_reply(
            ToolCall("a", "read_file", {"path": "x"}),
            ToolCall("b", "submit_plan", {"summary": "s"}),
        ),
    )
    [checked] = sim.of(StageCompletionChecked)
    assert checked.data.outcome == "batch_rejected" and checked.data.call_ids == ["a", "b"]
    assert sim.of(ToolInvocationProposed) == []
    results = [m for m in sim.request("plan").messages if m.role == "tool"]
    assert [m.tool_call_id for m in results] == ["a", "b"]
    assert all("sole tool call" in m.text for m in results)


def test_two_completion_calls_are_rejected() -> None:
    sim = Sim(workflow(Step(("plan",)), stages=[stage("plan")]))
    sim.answer(
        "plan",
        calls_reply(
            ToolCall("a", "submit_plan", {"summary": "1"}),
            ToolCall("b", "submit_plan", {"summary": "2"}),
        ),
    )
    assert sim.of(StageCompletionChecked)[0].data.outcome == "batch_rejected"
    assert sim.of(StageExited) == []


def test_the_turn_cap_ends_act_and_the_default_assert_fails_the_stage() -> None:
    sim = Sim(workflow(Step(("plan",)), stages=[stage("plan", turn_cap=2)]))
    sim.answer("plan", success("hmm"))
    sim.answer("plan", success("hmm again"))
    assert sim.waiting() == {}
    outcomes = [e.data.outcome for e in sim.of(StageCompletionChecked)]
    assert outcomes == ["no_call", "no_call", "cap_hit"]
    [asserted] = sim.of(StageAssertOutcome)
    assert asserted.data.verdict == "fail" and asserted.data.cap_hit
    [ended] = sim.of(TurnEnded)
    assert ended.data.failure_class == "report_missing" and ended.data.next_action
    [end] = sim.of(WorkflowExit)
    assert end.data.status == "failed" and end.data.failure == "StageFailed"


def test_calls_inside_a_stage_carry_its_envelope_and_results_come_back() -> None:
    sim = Sim(workflow(Step(("plan",)), stages=[stage("plan")]))
    sim.answer("plan", calls_reply(ToolCall("a", "read_file", {"path": "x"})))
    [proposed] = sim.of(ToolInvocationProposed)
    envelope = proposed.data.envelope
    assert envelope is not None and envelope.allowed_tools == ["read_file"]
    inv, turn = proposed.data.invocation_id, proposed.turn_id
    sim.apply(
        [
            fact(
                ToolCallApproved,
                ToolCallApprovedData,
                turn,
                invocation_id=inv,
                authority="workflow",
            )
        ]
    )
    sim.decide()
    assert len(sim.of(ToolInvocationRequested)) == 1
    sim.apply([succeed(inv, "file text", turn)])
    sim.decide()
    assert sim.request("plan").messages[-1].text == "file text"


def test_retry_reenters_act_in_the_same_transcript_up_to_max_attempts() -> None:
    sim = Sim(workflow(Step(("plan",)), stages=[stage("plan")]))
    sim.config = replace(sim.config, workflow_hooks=frozenset({"Assert"}))
    sim.answer("plan", complete("submit_plan", summary="v1"))
    execution = sim.of(StageEntered)[0].data.stage_execution_id
    sim.decide(WorkflowHookSaid(execution, "Assert", "retry", reason="too vague"))
    request = sim.request("plan")
    assert request.messages[-1].text == "Retry (attempt 2): too vague"
    assert any(m.tool_calls for m in request.messages)  # the same transcript
    sim.answer("plan", complete("submit_plan", summary="v2"))
    sim.decide(WorkflowHookSaid(execution, "Assert", "retry", reason="still"))
    verdicts = [e.data.verdict for e in sim.of(StageAssertOutcome)]
    assert verdicts == ["retry", "fail"]  # maxAttempts=2: no third attempt
    assert "maxAttempts=2" in (sim.of(StageExited)[0].data.result.reason or "")


def test_a_failed_stage_runs_its_on_fail_branch_then_the_workflow_goes_on() -> None:
    sim = Sim(
        workflow(
            Step(("plan",)),
            Step(("ship",)),
            stages=[
                stage("plan", turn_cap=1),
                stage("fix", body="Fix: {{ctx.upstream[0].reason}}"),
                stage("ship"),
            ],
            on_fail={"plan": "fix"},
        )
    )
    sim.answer("plan", success("no"))
    assert sim.request("fix").system.startswith("Fix: turnCap=1")
    assert sim.of(StageEntered)[-1].data.recovers == "plan"
    sim.answer("fix", complete("submit_fix", summary="fixed"))
    sim.answer("ship", complete("submit_ship", summary="shipped"))
    assert sim.of(WorkflowExit)[0].data.status == "completed"


def test_parallel_siblings_run_at_once_and_the_join_sees_both_results() -> None:
    sim = Sim(
        workflow(
            Step(("review-a", "review-b"), join="merge"),
            stages=[
                stage("review-a"),
                stage("review-b"),
                stage(
                    "merge",
                    body="{{ctx.upstream[0].output.summary}}+{{ctx.upstream[1].output.summary}}",
                ),
            ],
        )
    )
    assert sorted(sim.waiting().values()) == ["review-a", "review-b"]
    sim.answer("review-b", complete("submit_review_b", summary="B"))
    assert "merge" not in sim.waiting().values()
    sim.answer("review-a", complete("submit_review_a", summary="A"))
    assert sim.request("merge").system == "A+B"
    sim.answer("merge", complete("submit_merge", summary="AB"))
    assert sim.of(WorkflowExit)[0].data.status == "completed"


def test_a_sibling_failure_cancels_the_others_and_the_join_never_runs() -> None:
    sim = Sim(
        workflow(
            Step(("review-a", "review-b"), join="merge"),
            stages=[stage("review-a", turn_cap=1), stage("review-b"), stage("merge")],
        )
    )
    sim.answer("review-a", success("no tool"))
    [cancelled] = sim.of(StageCancelled)
    assert cancelled.data.stage == "review-b" and cancelled.data.cause == "ParallelSiblingFailure"
    assert [e.data.stage for e in sim.of(StageExited)] == ["review-a"]  # no Exit for b
    b_end = [e for e in sim.of(TurnEnded) if e.turn_id == cancelled.data.stage_execution_id]
    assert b_end[0].data.failure_class == "interrupted"
    assert all(e.data.stage != "merge" for e in sim.of(StageEntered))
    [end] = sim.of(WorkflowExit)
    assert end.data.status == "failed" and end.data.failure == "ParallelSiblingFailure"
    assert sim.waiting() == {}


def test_an_upstream_result_failing_inputs_schema_is_a_stage_init_failure() -> None:
    needs = {"type": "object", "properties": {"parsed": {"required": ["steps"]}}}
    sim = Sim(
        workflow(
            Step(("plan",)),
            Step(("build",)),
            stages=[stage("plan"), stage("build", inputs_schema=needs)],
        )
    )
    sim.answer("plan", complete("submit_plan", summary="s"))
    [failed] = sim.of(StageInitFailed)
    assert "upstream[0] (plan)" in failed.data.reason and "'steps'" in failed.data.reason
    assert sim.of(WorkflowExit)[0].data.failure == "StageInitFailed"


def test_a_placeholder_the_context_lacks_is_an_init_error_not_an_empty_string() -> None:
    sim = Sim(workflow(Step(("plan",)), stages=[stage("plan", body="{{ctx.missing}}")]))
    [failed] = sim.of(StageInitFailed)
    assert "no field 'missing'" in failed.data.reason


def test_messages_during_a_run_wait_for_it_and_a_hard_interrupt_cancels_it() -> None:
    sim = Sim(workflow(Step(("plan",)), stages=[stage("plan")]))
    sim.apply([accepted(1, "are you there?")])
    sim.decide()
    assert len(sim.of(FollowUpQueued)) == 1
    assert len(sim.of(SessionTurnStart)) == 1  # only the stage's
    sim.apply([interrupt("hard")])
    sim.decide()
    assert sim.of(StageCancelled)[0].data.cause == "interrupted"
    assert sim.of(WorkflowExit)[0].data.status == "cancelled"
    starts = sim.of(SessionTurnStart)
    assert len(starts) == 2 and starts[-1].data.text == "are you there?"  # the chat goes on


def test_the_state_round_trips_through_json_mid_run_and_replays_the_same() -> None:
    sim = Sim(workflow(Step(("a", "b"), join="c"), stages=[stage("a"), stage("b"), stage("c")]))
    sim.answer("a", complete("submit_a", summary="A"))
    assert state_from_json(state_to_json(sim.state)) == sim.state
    replayed = SessionState.of("s1")
    for event in sim.log:
        replayed = evolve(replayed, event)
    assert replayed == sim.state


def test_a_snapshot_whose_lanes_were_session_states_still_loads() -> None:
    """Snapshots written before the lanes were `ChatState`s carry `"workflow": null` in
    each lane: loading one ignores it."""
    sim = Sim(workflow(Step(("a", "b"), join="c"), stages=[stage("a"), stage("b"), stage("c")]))
    sim.answer("a", complete("submit_a", summary="A"))
    dumped = orjson.loads(state_to_json(sim.state))
    lanes = [ex["lane"] for ex in dumped["workflow"]["executions"]]
    assert len(lanes) == 2 and all("workflow" not in lane for lane in lanes)
    for lane in lanes:
        lane["workflow"] = None
    loaded = state_from_json(orjson.dumps(dumped))
    assert loaded == sim.state
    assert loaded.workflow is not None
    assert all(type(ex.lane) is ChatState for ex in loaded.workflow.executions)


def test_a_second_attach_waits_for_the_running_one_then_starts() -> None:
    sim = Sim(workflow(Step(("a",)), stages=[stage("a")]))
    second = sim.log[0].model_copy(update={"id": "att2"})
    second = second.model_copy(update={"data": second.data.model_copy(update={"run_id": "run2"})})
    sim.apply([second])
    sim.decide()
    assert len(sim.of(StageEntered)) == 1  # the first run goes on alone
    sim.answer("a", complete("submit_a", summary="1"))
    assert [e.data.run_id for e in sim.of(WorkflowExit)] == ["run1"]
    assert sim.state.workflow is not None and sim.state.workflow.run_id == "run2"
    assert len(sim.of(StageEntered)) == 2
    sim.answer("a", complete("submit_a", summary="2"))
    assert [e.data.run_id for e in sim.of(WorkflowExit)] == ["run1", "run2"]


def test_a_recover_stage_that_cannot_start_ends_the_run_instead_of_looping() -> None:
    sim = Sim(
        workflow(
            Step(("plan",)),
            stages=[stage("plan", turn_cap=1), stage("fix", body="{{ctx.upstream[0].output.x}}")],
            on_fail={"plan": "fix"},
        )
    )
    sim.answer("plan", success("no"))
    [failed] = sim.of(StageInitFailed)
    assert failed.data.recovers == "plan"
    [end] = sim.of(WorkflowExit)
    assert end.data.status == "failed" and "recover stage fix failed too" in (end.data.reason or "")


def test_on_fail_of_a_parallel_sibling_runs_the_recover_branch_after_cancelling() -> None:
    sim = Sim(
        workflow(
            Step(("a", "b"), join="j"),
            Step(("last",)),
            stages=[stage("a", turn_cap=1), stage("b"), stage("j"), stage("fix"), stage("last")],
            on_fail={"a": "fix"},
        )
    )
    sim.answer("a", success("no"))
    assert [e.data.stage for e in sim.of(StageCancelled)] == ["b"]
    assert "fix" in sim.waiting().values()
    sim.answer("fix", complete("submit_fix", summary="fixed"))
    assert sim.request("last").system  # the run went on after the recover branch
    sim.answer("last", complete("submit_last", summary="done"))
    assert sim.of(WorkflowExit)[0].data.status == "completed"
    assert all(e.data.stage != "j" for e in sim.of(StageEntered))  # the join never ran


def drive(sim: Sim, budget: int = 40) -> None:
    """Answer every waiting stage with a valid completion until the run ends."""
    for _ in range(budget):
        sim.decide()
        waiting = sim.waiting()
        if not waiting:
            return
        for stage_id in sorted(set(waiting.values())):
            tool = f"submit_{stage_id.replace('-', '_')}"
            sim.answer(stage_id, complete(tool, summary=stage_id))


def check_invariants(log: list[Event]) -> None:
    started = [e.turn_id for e in log if isinstance(e, SessionTurnStart)]
    ended = [e.turn_id for e in log if isinstance(e, TurnEnded)]
    closed = [e.turn_id for e in log if e.type == "SessionTurnEnd"]
    assert sorted(ended) == sorted(set(ended)) == sorted(started), (started, ended)
    assert sorted(closed) == sorted(started)
    [end] = [e for e in log if isinstance(e, WorkflowExit)]
    assert end.data.status == "completed", end.data


def test_a_runner_that_crashed_mid_commit_continues_from_any_durable_prefix() -> None:
    """The runner awaits a decision's first event and pipelines the rest: a crash can leave
    any prefix of it in the log. Every prefix of every decision must continue correctly."""
    definition = workflow(
        Step(("plan",)),
        Step(("a", "b"), join="j"),
        Step(("last",)),
        stages=[stage("plan"), stage("a"), stage("b"), stage("j"), stage("last")],
    )
    full = Sim(definition)
    drive(full)
    check_invariants(full.log)
    cut = 0
    for index, decision in enumerate(full.decisions):
        before = [e for d in full.decisions[:index] for e in d]
        for k in range(1, len(decision)):
            sim = Sim(definition)
            sim.state, sim.log, sim.ids = SessionState.of("s1"), [], Ids(f"r{index}-{k}-")
            sim.apply(before + decision[:k])
            drive(sim)
            check_invariants(sim.log)
            cut += 1
    assert cut > 50  # the scenario really cut many decisions short


def test_next_wakeup_is_the_next_wait_still_ahead() -> None:
    sim = Sim(workflow(Step(("a", "b")), stages=[stage("a"), stage("b")]))
    run = sim.state.workflow
    assert run is not None
    a, b = run.executions
    past, ahead = T0 - timedelta(seconds=5), T0 + timedelta(seconds=6)
    run = replace(
        run,
        executions=(replace(a, wait_until=past), replace(b, wait_until=ahead)),
    )
    assert next_wakeup(replace(sim.state, workflow=run), T0) == ahead


def test_an_attach_during_a_chat_turn_runs_before_messages_sent_after_it() -> None:
    sim = Sim(workflow(Step(("plan",)), stages=[stage("plan")]))
    attach = sim.log[0]
    chat = Sim.__new__(Sim)
    chat.ids, chat.config, chat.state, chat.log, chat.decisions = (
        Ids(),
        TurnConfig(),
        SessionState.of("s1"),
        [],
        [],
    )
    chat.apply([accepted(1, "first")])
    chat.decide()
    chat.apply([attach, accepted(2, "second")])
    chat.decide()
    turn = chat.state.chat.active
    assert turn is not None and turn.awaiting_provider
    chat.decide(ProviderDone(turn.turn_id, success("reply 1")))
    order = [
        ("turn", e.data.text) if isinstance(e, SessionTurnStart) else ("stage", e.data.stage)
        for e in chat.log
        if isinstance(e, SessionTurnStart | StageEntered)
    ]
    assert order[:2] == [("turn", "first"), ("stage", "plan")], order
    assert ("turn", "second") not in order  # it waits for the run


def test_a_hard_interrupt_is_not_undone_by_a_later_graceful_one() -> None:
    sim = Sim(workflow(Step(("plan",)), stages=[stage("plan")]))

    sim.apply([interrupt("hard", 1), interrupt("graceful", 2)])
    sim.decide()
    assert sim.of(WorkflowExit)[0].data.status == "cancelled"


def test_a_graceful_interrupt_reaches_a_stage_mid_act_which_summarises_and_the_run_stops() -> None:
    sim = Sim(workflow(Step(("plan",)), Step(("build",)), stages=[stage("plan"), stage("build")]))
    sim.apply([interrupt("graceful")])
    sim.decide()
    [asked] = [e for e in sim.log if e.type == "SteeringInjected"]
    assert asked.turn_id in sim.waiting()  # the stage's turn is asked to summarise
    sim.answer("plan", success("half a plan"))  # the call that was in flight: no completion
    assert not [e for e in sim.log if e.type == "StageCompletionChecked"]  # nobody steers it
    request = sim.request("plan")
    assert request.tools == () and "interrupted" in request.messages[-1].text
    sim.answer("plan", success("planned two of five steps, then stopped"))
    [checked] = [e for e in sim.log if e.type == "StageCompletionChecked"]
    assert checked.data.outcome == "interrupted"
    [cancelled] = [e for e in sim.log if e.type == "StageCancelled"]
    assert cancelled.data.cause == "interrupted"
    [end] = sim.of(WorkflowExit)
    assert end.data.status == "cancelled"
    assert [e.data.stage for e in sim.of(StageEntered)] == ["plan"]  # build never starts
    assert sim.waiting() == {}
