"""The pure turn core: given events → decide → expected events. No I/O."""

from __future__ import annotations

import itertools
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.factories import Ids, accepted, ctx, failure, run_turn, success
from turnstream.core.events import (
    FailureClass,
    FollowUpQueued,
    ProviderRequestStarted,
    RenderEmitted,
    SessionTurnEnd,
    SessionTurnStart,
    Stage,
    StagePostFired,
    StagePreFired,
    SteeringInjected,
    TurnEnded,
    unmerged,
)
from turnstream.core.session import SessionState, evolve, fold, follow_session
from turnstream.core.turn import (
    TurnConfig,
    compose_request,
    needs_provider_call,
    on_provider_result,
)

TEXT_TURN = [
    "SessionTurnStart",
    "StagePreFired:RECEIVE_INPUT",
    "StagePreFired:COMPOSE_REQUEST<RECEIVE_INPUT",
    "StagePreFired:SEND_REQUEST<COMPOSE_REQUEST",
    "ProviderRequestStarted",
    "StagePreFired:STREAM_RESPONSE<SEND_REQUEST",
    "ProviderRequestCompleted",
    "StagePreFired:RENDER<STREAM_RESPONSE",
    "RenderEmitted",
    "StagePostFired:RENDER",
    "TurnEnded",
    "SessionTurnEnd",
]
"""A text turn as stored: a stage left and the next entered in one decision are one event
(`StagePreFired:B<A` is A's `StagePostFired` and B's `StagePreFired`)."""

TEXT_TURN_STAGES = [
    "SessionTurnStart",
    "StagePreFired:RECEIVE_INPUT",
    "StagePostFired:RECEIVE_INPUT",
    "StagePreFired:COMPOSE_REQUEST",
    "StagePostFired:COMPOSE_REQUEST",
    "StagePreFired:SEND_REQUEST",
    "ProviderRequestStarted",
    "StagePostFired:SEND_REQUEST",
    "StagePreFired:STREAM_RESPONSE",
    "ProviderRequestCompleted",
    "StagePostFired:STREAM_RESPONSE",
    "StagePreFired:RENDER",
    "RenderEmitted",
    "StagePostFired:RENDER",
    "TurnEnded",
    "SessionTurnEnd",
]
"""The same turn with each merged event as the two it stands for (`unmerged`)."""


def kinds(events: list) -> list[str]:
    out = []
    for e in events:
        if isinstance(e, StagePreFired) and e.data.previous is not None:
            out.append(f"{e.type}:{e.data.stage}<{e.data.previous.stage}")
        elif isinstance(e, StagePreFired | StagePostFired):
            out.append(f"{e.type}:{e.data.stage}")
        else:
            out.append(e.type)
    return out


def with_input(*inputs) -> SessionState:
    return fold(SessionState.of("s1"), list(inputs))


def test_text_turn_walks_every_stage_in_order() -> None:
    state, log = run_turn(with_input(accepted(1, "hello")), [success("hi there")])
    assert kinds(log) == TEXT_TURN
    assert kinds(unmerged(log)) == TEXT_TURN_STAGES
    ended = [e for e in log if isinstance(e, TurnEnded)]
    assert len(ended) == 1
    assert ended[0].data.status == "completed"
    assert ended[0].data.reply == "hi there"
    assert state.chat.active is None
    assert state.chat.turns_ended == 1 and state.chat.last_status == "completed"


def test_decide_stops_to_wait_for_the_provider() -> None:
    state = with_input(accepted(1))
    events = follow_session(state, TurnConfig(), ctx())
    assert isinstance(events[-1], ProviderRequestStarted)
    state = fold(state, events)
    assert needs_provider_call(state.chat)
    assert list(follow_session(state, TurnConfig(), ctx())) == []


def test_events_carry_turn_identity_and_a_causation_chain() -> None:
    _, log = run_turn(with_input(accepted(1)), [success()])
    assert {e.turn_id for e in log} == {"turn1"}
    assert {e.correlation_id for e in log} == {"key1"}
    assert {e.trace_id for e in log} == {"trace1"}
    assert log[0].causation_id == "in1"
    for before, after in itertools.pairwise(log):
        assert after.causation_id == before.id


def test_request_is_composed_from_the_history() -> None:
    state, _ = run_turn(with_input(accepted(1, "first")), [success("one")])
    state = evolve(state, accepted(2, "second"))
    state = fold(state, follow_session(state, TurnConfig(system_prompt="be brief"), ctx(Ids("x"))))
    request = compose_request(state.chat, TurnConfig(system_prompt="be brief"))
    assert [(m.role, m.text) for m in request.messages] == [
        ("user", "first"),
        ("assistant", "one"),
        ("user", "second"),
    ]
    assert request.call_index == 1
    assert request.system == "be brief"
    assert request.turn_id == "turn2"


def test_provider_failure_ends_the_turn_with_provider_error() -> None:
    state, log = run_turn(with_input(accepted(1)), [failure()])
    ended = [e for e in log if isinstance(e, TurnEnded)]
    assert len(ended) == 1
    assert ended[0].data.status == "failed"
    assert ended[0].data.failure_class is FailureClass.PROVIDER_ERROR
    assert ended[0].data.next_action
    assert isinstance(log[-1], SessionTurnEnd)
    assert state.chat.active is None and state.chat.last_status == "failed"


def test_max_tokens_asks_for_one_continuation_and_joins_the_reply() -> None:
    _state, log = run_turn(
        with_input(accepted(1)), [success("part one, ", "max_tokens"), success("part two")]
    )
    ended = next(e for e in log if isinstance(e, TurnEnded))
    assert ended.data.reply == "part one, part two"
    assert ended.data.iterations == 2
    composes = [
        e for e in log if isinstance(e, StagePreFired) and e.data.stage == "COMPOSE_REQUEST"
    ]
    assert [e.data.iteration for e in composes] == [1, 2]


def test_continuations_are_bounded_by_max_output_continuations() -> None:
    replies = [success(f"p{i} ", "max_tokens") for i in range(5)]
    _, log = run_turn(with_input(accepted(1)), replies, TurnConfig(max_output_continuations=2))
    ended = next(e for e in log if isinstance(e, TurnEnded))
    assert ended.data.status == "completed"
    assert ended.data.reply == "p0 p1 p2 "
    assert sum(isinstance(e, ProviderRequestStarted) for e in log) == 3


def test_max_iterations_ends_the_turn_with_limit_exceeded() -> None:
    config = TurnConfig(max_iterations=2, max_output_continuations=10)
    replies = [success("more ", "max_tokens") for _ in range(5)]
    _, log = run_turn(with_input(accepted(1)), replies, config)
    assert sum(isinstance(e, ProviderRequestStarted) for e in log) == 2
    ended = [e for e in log if isinstance(e, TurnEnded)]
    assert len(ended) == 1
    assert ended[0].data.failure_class is FailureClass.LIMIT_EXCEEDED
    assert "maxIterations=2" in (ended[0].data.reason or "")
    assert "may have completed" in (ended[0].data.next_action or "")


def test_input_during_a_turn_is_queued_then_runs_as_the_next_turn() -> None:
    config, c = TurnConfig(), ctx()
    state = with_input(accepted(1, "first"))
    state = fold(state, follow_session(state, config, c))
    state = evolve(state, accepted(2, "second"))
    parked = follow_session(state, config, c)
    assert kinds(parked) == ["FollowUpQueued"]
    assert parked[0].turn_id == "turn2"
    assert isinstance(parked[0], FollowUpQueued) and parked[0].data.behind_turn_id == "turn1"
    state = fold(state, parked)
    assert list(follow_session(state, config, c)) == []  # still waiting for the provider
    after = on_provider_result(state.chat, success("one"), config, c)
    # turn 1 ends, then turn 2 starts in the same decision
    names = kinds(after)
    assert names.index("SessionTurnEnd") < names.index("SessionTurnStart")
    start = next(e for e in after if isinstance(e, SessionTurnStart))
    assert start.turn_id == "turn2" and start.data.text == "second"


def test_steer_during_a_turn_is_injected_before_the_next_compose() -> None:
    config, c = TurnConfig(max_output_continuations=1), ctx()
    state = with_input(accepted(1, "first"))
    state = fold(state, follow_session(state, config, c))
    state = evolve(state, accepted(2, "go shorter", kind="steer"))
    steer = follow_session(state, config, c)
    assert kinds(steer) == ["SteeringInjected"]
    assert isinstance(steer[0], SteeringInjected) and steer[0].turn_id == "turn1"
    state = fold(state, steer)
    events = on_provider_result(state.chat, success("long…", "max_tokens"), config, c)
    state = fold(state, events)
    request = compose_request(state.chat, config)
    assert [m.text for m in request.messages] == ["first", "long…", "go shorter"]


def test_a_steer_recorded_for_another_turn_still_leaves_the_pending_inputs() -> None:
    """Its input steered a turn (the log says so): it does not wait to start one, whichever
    turn the chat holds now, and that turn hears nothing of it."""
    config, c = TurnConfig(), ctx()
    state = with_input(accepted(1, "first"))
    state = fold(state, follow_session(state, config, c))
    state = evolve(state, accepted(2, "go shorter", kind="steer"))
    [steer] = follow_session(state, config, c)
    assert isinstance(steer, SteeringInjected) and state.chat.pending
    elsewhere = evolve(state, steer.model_copy(update={"turn_id": "turn9"}))
    assert elsewhere.chat.pending == ()
    assert elsewhere.chat.active == state.chat.active


def test_steer_with_no_active_turn_starts_one() -> None:
    _, log = run_turn(with_input(accepted(1, "steer me", kind="steer")), [success()])
    assert kinds(log) == TEXT_TURN


def test_a_late_provider_result_is_ignored() -> None:
    state, _ = run_turn(with_input(accepted(1)), [success()])
    assert list(on_provider_result(state.chat, success(), TurnConfig(), ctx())) == []


def test_turn_ended_for_another_turn_does_not_touch_the_active_one() -> None:
    state = with_input(accepted(1))
    state = fold(state, follow_session(state, TurnConfig(), ctx()))
    foreign = TurnEnded.model_validate(
        {
            **accepted(9).model_dump(by_alias=True, exclude={"type", "data"}),
            "id": "x",
            "turnId": "other",
            "data": {"status": "failed", "failureClass": "invalid_input"},
        }
    )
    assert evolve(state, foreign) == state


def test_each_prefix_of_a_turn_continues_to_the_same_end() -> None:
    """Recovery: whatever prefix of a turn's events is durable, deciding again finishes it
    with exactly one terminal event and the same stage sequence."""
    start = with_input(accepted(1))
    _, full = run_turn(start, [success("hi")])
    for cut in range(1, len(full)):
        state = fold(start, full[:cut])
        _, rest = run_turn(state, [success("hi")], ids=Ids("r"))
        names = kinds(full[:cut] + rest)
        assert names.count("TurnEnded") == 1, (cut, names)
        assert names[-1] == "SessionTurnEnd"


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(st.text(min_size=1, max_size=20), min_size=1, max_size=6),
    stops=st.lists(st.sampled_from(["end_turn", "max_tokens"]), min_size=1, max_size=12),
    fail_at=st.integers(min_value=-1, max_value=12),
)
def test_every_input_gets_exactly_one_terminal_event(texts, stops, fail_at) -> None:
    state = with_input(*[accepted(i, t) for i, t in enumerate(texts, 1)])
    config, c = TurnConfig(max_iterations=3, max_output_continuations=1), ctx()
    log = list(follow_session(state, config, c))
    state = fold(state, log)
    calls = 0
    while needs_provider_call(state.chat):
        outcome = failure() if calls == fail_at else success("x", stops[calls % len(stops)])
        events = on_provider_result(state.chat, outcome, config, c)
        state = fold(state, events)
        log += events
        calls += 1
    ended = [e for e in log if isinstance(e, TurnEnded)]
    assert sorted(e.turn_id for e in ended) == sorted(f"turn{i}" for i in range(1, len(texts) + 1))
    assert [e.turn_id for e in ended] == [f"turn{i}" for i in range(1, len(texts) + 1)]
    assert state.chat.active is None and state.chat.pending == ()
    rendered = [e for e in log if isinstance(e, RenderEmitted)]
    assert len(rendered) == sum(e.data.status == "completed" for e in ended)


def test_state_survives_a_json_round_trip() -> None:
    from turnstream.core.session import state_from_json, state_to_json

    state = with_input(accepted(1), accepted(2))
    state = fold(state, follow_session(state, TurnConfig(), ctx()))
    assert state_from_json(state_to_json(state)) == state
    assert replace(state, chat=replace(state.chat, provider_calls=9)) != state


def test_stage_enum_matches_design_order() -> None:
    assert [s.value for s in Stage] == [
        "RECEIVE_INPUT",
        "COMPOSE_REQUEST",
        "SEND_REQUEST",
        "STREAM_RESPONSE",
        "TOOL_CALL",
        "RENDER",
    ]


def test_prompt_too_long_compacts_the_oldest_turns_and_asks_once_more() -> None:
    from turnstream.core.events import ContextCompacted
    from turnstream.core.turn import ProviderFailure

    state, _ = run_turn(with_input(accepted(1, "first " * 50)), [success("one " * 50)])
    state = fold(state, [accepted(2, "second")])
    state, _ = run_turn(state, [success("two")])
    state = fold(state, [accepted(3, "third")])
    too_long = ProviderFailure(
        "prompt_too_long", "prompt is too long", False, success().finished_at
    )
    state, log = run_turn(state, [too_long, success("three")], ids=Ids("z"))
    compacted = [e for e in log if isinstance(e, ContextCompacted)]
    assert len(compacted) == 1 and compacted[0].data.dropped_messages == 2
    assert compacted[0].data.tokens_after < compacted[0].data.tokens_before
    ended = [e for e in log if isinstance(e, TurnEnded)]
    assert ended[-1].data.status == "completed" and ended[-1].data.reply == "three"
    assert [m.text for m in state.chat.history][:2] == ["second", "two"]


def test_prompt_too_long_twice_or_with_nothing_to_drop_fails_the_turn() -> None:
    from turnstream.core.turn import ProviderFailure

    too_long = ProviderFailure(
        "prompt_too_long", "prompt is too long", False, success().finished_at
    )
    _, log = run_turn(with_input(accepted(1)), [too_long])
    ended = [e for e in log if isinstance(e, TurnEnded)]
    assert ended and ended[0].data.failure_class is FailureClass.PROVIDER_ERROR
    assert "prompt_too_long" in (ended[0].data.reason or "")


def test_tools_are_not_offered_to_a_model_without_tool_calling() -> None:
    from turnstream.core.turn import ToolInfo

    tools = (ToolInfo("read_file", "r", {"type": "object"}, True, True, 1.0),)
    state = with_input(accepted(1))
    for offer, expected in ((True, 1), (False, 0)):
        config = TurnConfig(tools=tools, offer_tools=offer)
        decided = fold(state, follow_session(state, config, ctx()))
        assert len(compose_request(decided.chat, config).tools) == expected


def test_the_steer_policy_steers_a_message_that_arrives_mid_turn() -> None:
    config, c = TurnConfig(followup_policy="steer"), ctx()
    state = with_input(accepted(1, "first"))
    state = fold(state, follow_session(state, config, c))
    state = evolve(state, accepted(2, "actually, shorter"))
    parked = follow_session(state, config, c)
    assert kinds(parked) == ["SteeringInjected"] and parked[0].turn_id == "turn1"


def test_every_event_kind_has_the_family_fold_its_class_pattern_names() -> None:
    """`evolve` keeps each kind's family in a table: the match in `_family` (exhaustive for
    the type checker) must answer for every kind by its class alone."""
    from turnstream.core.events import EVENT_TYPES
    from turnstream.core.turn.evolve import _family, _lifecycle, _unchanged
    from turnstream.core.turn.evolve_tools import evolve_call

    families = {kind: _family(object.__new__(cls)) for kind, cls in EVENT_TYPES.items()}
    assert all(callable(family) for family in families.values())
    assert families["StagePreFired"] is families["TurnEnded"] is _lifecycle
    assert families["ToolCallApproved"] is evolve_call
    assert families["WorkflowAttached"] is families["ToolInvocationStarted"] is _unchanged
