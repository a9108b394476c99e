"""Budgets, decided: before each model call the turn checks what it and its session have
spent (tokens, or dollars by the price table) plus the call's estimated input against the
limits; over, it ends `budget_exceeded` with a next action naming the limit, and the model
is not called. A replay folds the same spend from the log. No I/O."""

from __future__ import annotations

from dataclasses import replace

from tests.unit.factories import accepted, run_turn, success
from turnstream.core.costs import Budget, Price
from turnstream.core.events import (
    FailureClass,
    ProviderRequestCompleted,
    ProviderRequestStarted,
    TurnEnded,
    Usage,
)
from turnstream.core.session import SessionState, fold
from turnstream.core.turn import TurnConfig

CONFIG = TurnConfig(provider="anthropic", model="claude-x-1", max_output_continuations=0)


def costly(input_tokens: int = 40_000, output_tokens: int = 1_000, cached: int = 0):
    answer = success("ok")
    usage = Usage(input_tokens=input_tokens, output_tokens=output_tokens, cache_read_tokens=cached)
    return replace(answer, usage=usage)


def turns(config: TurnConfig, count: int) -> tuple[SessionState, list]:
    state, log = fold(SessionState.of("s1"), []), []
    for n in range(1, count + 1):
        state = fold(state, [accepted(n, f"question {n}")])
        state, events = run_turn(state, [costly()], config)
        log += events
    return state, log


def ends(log: list) -> list[TurnEnded]:
    return [e for e in log if isinstance(e, TurnEnded)]


def test_without_a_budget_nothing_is_checked() -> None:
    _, log = turns(CONFIG, 3)
    assert [e.data.status for e in ends(log)] == ["completed"] * 3


def test_a_session_token_budget_stops_the_turn_before_the_call_that_would_pass_it() -> None:
    config = replace(CONFIG, budget=Budget(session_tokens=80_000))
    state, log = turns(config, 3)  # 41,000 tokens a turn: two spent 82,000
    first, second, third = ends(log)
    assert first.data.status == second.data.status == "completed"
    assert third.data.status == "failed"
    assert third.data.failure_class is FailureClass.BUDGET_EXCEEDED
    assert "session over its budget" in (third.data.reason or "")
    assert "session_tokens in TURNSTREAM_BUDGET" in (third.data.next_action or "")
    # the model was not called for the third turn
    assert len([e for e in log if isinstance(e, ProviderRequestStarted)]) == 2
    completed = [e for e in log if isinstance(e, ProviderRequestCompleted)]
    assert completed[0].data.model == "claude-x-1"
    # a replay folds the same spend from the log
    replayed = fold(SessionState.of("s1"), [accepted(1), accepted(2), accepted(3), *log])
    assert replayed.chat.spent == state.chat.spent
    ((key, spent),) = state.chat.spent
    assert key == "anthropic/claude-x-1" and spent.input == 80_000 and spent.output == 2_000


def test_a_turn_budget_counts_the_turn_alone() -> None:
    config = replace(CONFIG, budget=Budget(turn_tokens=45_000))
    _, log = turns(config, 3)  # each turn alone stays under it
    assert [e.data.status for e in ends(log)] == ["completed"] * 3
    tiny = replace(CONFIG, budget=Budget(turn_tokens=5))  # the first call's input alone
    _, log = turns(tiny, 1)
    (end,) = ends(log)
    assert end.data.failure_class is FailureClass.BUDGET_EXCEEDED
    assert "turn_tokens in TURNSTREAM_BUDGET" in (end.data.next_action or "")
    assert not [e for e in log if isinstance(e, ProviderRequestStarted)]


def test_a_dollar_budget_prices_each_models_tokens_cached_ones_cheaper() -> None:
    price = Price(input=3.0, output=15.0, cache_write=3.75, cache_read=0.30)
    # 40,000 in + 1,000 out = $0.135 a turn at full price
    config = replace(
        CONFIG, budget=Budget(session_usd=0.25), prices=(("anthropic/claude-x", price),)
    )
    _, log = turns(config, 3)
    assert [e.data.status for e in ends(log)] == ["completed", "completed", "failed"]
    assert "$0." in (ends(log)[2].data.reason or "")
    # an unpriced model: a dollar budget cannot see it (a token budget still would)
    unpriced = replace(config, prices=(("anthropic/other", price),))
    _, log = turns(unpriced, 3)
    assert [e.data.status for e in ends(log)] == ["completed"] * 3


def test_a_session_budget_counts_its_workflow_stages_and_a_stage_carries_its_own() -> None:
    from tests.unit.test_workflow_run import Sim, complete, stage, workflow
    from turnstream.core.events import StageExited, WorkflowExit
    from turnstream.core.workflow.definition import Step

    def spending(reply, tokens: int):  # type: ignore[no-untyped-def]
        return replace(reply, usage=Usage(input_tokens=tokens))

    # the plan stage spends 41,000; the session may spend 40,000: build is not called
    sim = Sim(workflow(Step(("plan",)), Step(("build",)), stages=[stage("plan"), stage("build")]))
    sim.config = replace(sim.config, budget=Budget(session_tokens=40_000))
    sim.answer("plan", spending(complete("submit_plan", summary="two steps"), 41_000))
    assert sim.state.spent == sim.state.stage_spent and sim.state.chat.spent == ()
    build_end = [e for e in sim.of(TurnEnded) if e.data.failure_class is not None]
    assert [e.data.failure_class for e in build_end] == [FailureClass.BUDGET_EXCEEDED]
    assert sim.of(WorkflowExit)[0].data.status == "failed"
    # a stage's own limit: its first call would pass it, the stage fails without a call
    own = stage("plan", budget={"turn_tokens": 5})
    sim = Sim(workflow(Step(("plan",)), stages=[own]))
    (ended,) = sim.of(TurnEnded)
    assert ended.data.failure_class is FailureClass.BUDGET_EXCEEDED
    assert sim.of(StageExited)[0].data.result.verdict != "ok"
    assert not sim.of(ProviderRequestStarted)


def test_an_agents_dollar_budget_is_priced_though_the_deployment_has_none() -> None:
    from turnstream.core.events import SessionConfiguredData
    from turnstream.core.events.agents import AgentBudget
    from turnstream.core.session.agent import with_agent
    from turnstream.settings import Settings

    deployment = Settings(provider="anthropic", model="claude-sonnet-4-5").turn_config()
    agent = SessionConfiguredData(
        agent="a", idempotency_key="k", budget=AgentBudget(session_usd=0.25)
    )
    config = with_agent(deployment, agent)
    _, log = turns(replace(config, model="claude-sonnet-4-5"), 3)
    assert [e.data.status for e in ends(log)] == ["completed", "completed", "failed"]
