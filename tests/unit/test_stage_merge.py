"""One event for a stage transition (schema version 2): a `StagePostFired` followed at once,
in one decision, by its turn's next `StagePreFired` is stored as that `StagePreFired` with
`previous`. Merged or not, the log folds to the same state and the same timeline."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.factories import T0, Ids, success
from tests.unit.test_interceptors import TOOLS, Shell, start
from turnstream.core.events import (
    Envelope,
    Event,
    PreviousStage,
    RenderEmitted,
    RenderEmittedData,
    Stage,
    StagePostFired,
    StagePostFiredData,
    StagePreFired,
    StagePreFiredData,
    merged_stages,
    stage_left,
    stamp,
    unmerged,
)
from turnstream.core.projection import build_view
from turnstream.core.session import SessionState, fold
from turnstream.core.turn import (
    HookPoint,
    HookSubject,
    ProviderFailure,
    ProviderSuccess,
    StageHookVerdict,
    ToolCall,
    TurnConfig,
)

ENVELOPE = Envelope("s1", "c1", "turn1", "trace1", "key1")


def post(event_id: str, cause: str, stage: Stage, turn: str = "turn1", at: int = 0) -> Event:
    data = StagePostFiredData(stage=stage, iteration=1, outcome="ok")
    return _stamped(StagePostFired, data, event_id, cause, turn, at)


def pre(event_id: str, cause: str, stage: Stage, turn: str = "turn1", at: int = 0) -> Event:
    data = StagePreFiredData(stage=stage, iteration=1)
    return _stamped(StagePreFired, data, event_id, cause, turn, at)


def _stamped(cls: type, data: object, event_id: str, cause: str, turn: str, at: int) -> Event:
    time = T0 + timedelta(milliseconds=at)
    return stamp(
        cls, data, ENVELOPE, event_id=event_id, time=time, source="t/1", causation_id=cause
    ).model_copy(update={"turn_id": turn})


def called(event_id: str, cause: str) -> Event:
    """Another event of the turn (which kind does not matter here)."""
    return _stamped(RenderEmitted, RenderEmittedData(text="x"), event_id, cause, "turn1", 0)


# -- the merge ----------------------------------------------------------------------------


def test_a_post_followed_by_its_pre_is_one_event_with_the_pres_id_and_the_posts_cause() -> None:
    events = [
        post("p1", "x0", Stage.RECEIVE_INPUT),
        pre("q1", "p1", Stage.COMPOSE_REQUEST, at=3),
    ]
    (merged,) = merged_stages(events)
    assert isinstance(merged, StagePreFired)
    assert merged.id == "q1" and merged.causation_id == "x0"
    assert merged.data.stage is Stage.COMPOSE_REQUEST
    assert merged.data.previous == PreviousStage(
        stage=Stage.RECEIVE_INPUT, iteration=1, outcome="ok", ended_at=T0
    )
    same_time = merged_stages([post("p1", "x0", Stage.SEND_REQUEST), pre("q1", "p1", Stage.RENDER)])
    assert same_time[0].data.previous.ended_at is None  # type: ignore[union-attr]


def test_a_post_that_no_pre_follows_at_once_stays_an_event() -> None:
    ending = [pre("q0", "x0", Stage.RECEIVE_INPUT), post("p1", "q0", Stage.RECEIVE_INPUT)]
    assert merged_stages(ending) == tuple(ending)  # the decision ends: a hook waits
    between = [post("p1", "x0", Stage.STREAM_RESPONSE), called("c1", "p1")]
    between.append(pre("q1", "c1", Stage.TOOL_CALL))
    assert merged_stages(between) == tuple(between)
    uncaused = [post("p1", "x0", Stage.TOOL_CALL), pre("q1", "zz", Stage.COMPOSE_REQUEST)]
    assert merged_stages(uncaused) == tuple(uncaused)
    lone_pre = [pre("q1", "x0", Stage.RECEIVE_INPUT)]
    assert merged_stages(lone_pre) == tuple(lone_pre)


def test_a_later_event_caused_by_the_dropped_post_names_the_merged_event() -> None:
    events = [
        post("p1", "x0", Stage.SEND_REQUEST),
        pre("q1", "p1", Stage.STREAM_RESPONSE),
        called("c1", "p1"),
        post("p2", "c1", Stage.STREAM_RESPONSE),
        pre("q2", "p2", Stage.TOOL_CALL),
        called("c2", "p2"),
    ]
    out = merged_stages(events)
    assert [e.id for e in out] == ["q1", "c1", "q2", "c2"]
    assert [e.causation_id for e in out] == ["x0", "q1", "c1", "q2"]


def test_stages_of_two_turns_are_never_merged() -> None:
    events = [post("p1", "x0", Stage.RENDER, turn="turnA"), pre("q1", "p1", Stage.RECEIVE_INPUT)]
    assert merged_stages(events) == tuple(events)


def test_unmerged_gives_back_the_two_events_a_merged_one_stands_for() -> None:
    events = [post("p1", "x0", Stage.TOOL_CALL, at=2), pre("q1", "p1", Stage.COMPOSE_REQUEST, at=5)]
    left, entered = unmerged(merged_stages(events))
    assert isinstance(left, StagePostFired) and isinstance(entered, StagePreFired)
    assert left.data == events[0].data and left.time == events[0].time
    assert left.causation_id == "x0" and entered.causation_id == left.id != entered.id
    assert entered.id == "q1" and entered.data == events[1].data
    assert stage_left(entered) is None


# -- merged or not, the same fold ---------------------------------------------------------


def _reply(kind: str, n: int) -> ProviderSuccess | ProviderFailure:
    if kind == "tools":
        calls = tuple(ToolCall(f"r{n}c{i}", "grep", {"q": str(i)}) for i in range(1 + n % 2))
        return replace(success("", "tool_use"), tool_calls=calls)
    if kind == "more":
        return success("part", "max_tokens")
    if kind == "fail":
        return ProviderFailure("bad_request", "no", False, T0)
    return success(f"done {n}")


def _run(replies: list[str], points: frozenset[HookPoint], merge: bool) -> Shell:
    def go_on(subject: HookSubject, point: HookPoint) -> StageHookVerdict:
        return StageHookVerdict(point, "continue")

    hooks = {p: (lambda s, p=p: go_on(s, p)) for p in points}
    config = TurnConfig(tools=TOOLS, max_output_continuations=1)
    shell = Shell(config, hooks, [_reply(k, n) for n, k in enumerate(replies)])
    shell.ids = Ids("m")
    if merge:
        return start(shell)
    with patch("turnstream.core.session.decider.merged_stages", lambda events: tuple(events)):
        return start(shell)


def _stage_points(events: list[Event]) -> list[tuple[str, str, str]]:
    return [(e.type, getattr(e.data, "stage", ""), e.id) for e in events if "Stage" in e.type]


@settings(max_examples=40, deadline=None)
@given(
    replies=st.lists(st.sampled_from(["tools", "more", "text", "fail"]), min_size=1, max_size=4),
    points=st.frozensets(st.sampled_from(list(HookPoint))),
)
def test_merged_and_separate_stage_events_fold_to_the_same_state(
    replies: list[str], points: frozenset[HookPoint]
) -> None:
    separate, merged = _run(replies, points, False), _run(replies, points, True)
    old, new = separate.log, merged.log
    assert not any(isinstance(e, StagePreFired) and e.data.previous for e in old)
    # each decision's events, merged: exactly what was stored
    assert [list(merged_stages(d)) for d in separate.decisions] == merged.decisions
    # a log written before (separate events) and one written now fold the same
    initial = SessionState.of("s1")
    assert fold(initial, old) == fold(initial, new) == merged.state == separate.state
    assert fold(initial, unmerged(new)) == merged.state
    # every stage point is still there, in order
    as_old = [(t, s) for t, s, _ in _stage_points(unmerged(new))]
    assert as_old == [(t, s) for t, s, _ in _stage_points(old)]
    # the timeline people read is the same too
    assert build_view("s1", old).turns == build_view("s1", new).turns
    dropped = sum(1 for e in new if isinstance(e, StagePreFired) and e.data.previous)
    assert len(new) == len(old) - dropped


def test_a_one_tool_turn_decides_8_events_fewer() -> None:
    replies = ["tools", "text"]
    separate, merged = _run(replies, frozenset(), False), _run(replies, frozenset(), True)
    stages = [e for e in merged.log if isinstance(e, StagePreFired | StagePostFired)]
    assert len([e for e in separate.log if isinstance(e, StagePreFired | StagePostFired)]) == 18
    assert len(stages) == 10 and len(separate.log) - len(merged.log) == 8
    assert [e.type for e in stages].count("StagePostFired") == 1  # RENDER's, before TurnEnded


def test_the_cli_line_of_a_merged_event_says_both_the_stage_left_and_the_one_entered() -> None:
    from turnstream.cli.summaries import summarize

    (merged,) = merged_stages([post("p1", "x0", Stage.TOOL_CALL), pre("q1", "p1", Stage.RENDER)])
    assert summarize(merged) == "TOOL_CALL ◂ ok · RENDER ▸ (round 1)"
    assert summarize(pre("q1", "p1", Stage.RENDER)) == "RENDER ▸ (round 1)"
