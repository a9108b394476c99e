"""One event for a stage transition (schema version 2): a `StagePostFired` followed at once,
in one decision, by its turn's next `StagePreFired` is stored as that `StagePreFired` with
`previous`. The deciders make that event themselves (`Builder.leave`, `onward`, `joined`);
`merged_stages` below is the rule they must agree with. Merged or not, the log folds to the
same state and the same timeline."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.factories import T0, Ids, ctx, success
from tests.unit.test_interceptors import TOOLS, Shell, start
from turnstream.core.events import (
    Envelope,
    Event,
    FailureClass,
    PreviousStage,
    RenderEmitted,
    RenderEmittedData,
    Stage,
    StagePostFired,
    StagePostFiredData,
    StagePreFired,
    StagePreFiredData,
    TurnEnded,
    joined,
    stage_left,
    stamp,
    unmerged,
)
from turnstream.core.events.base import changed
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
from turnstream.core.turn.builder import Builder
from turnstream.core.turn.state import ActiveTurn

ENVELOPE = Envelope("s1", "c1", "turn1", "trace1", "key1")


def merged_stages(events: list[Event]) -> list[Event]:
    """The stored form of one decision's events, by the rule: each `StagePostFired` that
    the next event, a `StagePreFired` of the same turn caused by it, follows at once is
    carried in that event's `previous`; a later event caused by the dropped one names the
    merged event instead."""
    out: list[Event] = []
    renamed: dict[str, str] = {}
    for event in events:
        last = out[-1] if out else None
        if (
            isinstance(event, StagePreFired)
            and isinstance(last, StagePostFired)
            and joined([last], [event]) != (last, event)
        ):
            (merged,) = joined([last], [event])
            out[-1] = merged
            renamed[last.id] = merged.id
            continue
        cause = event.causation_id
        out.append(changed(event, causation_id=renamed[cause]) if cause in renamed else event)
    return out


def post(event_id: str, cause: str, stage: Stage, turn: str = "turn1", at: int = 0) -> Event:
    data = StagePostFiredData(stage=stage, iteration=1, outcome="ok")
    return _stamped(StagePostFired, data, event_id, cause, turn, at)


def pre(event_id: str, cause: str, stage: Stage, at: int = 0, turn: str = "turn1") -> Event:
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


# -- an answer's close and the decider's next stage: `joined` ------------------------------


def test_a_post_followed_by_its_pre_is_one_event_with_the_pres_id_and_the_posts_cause() -> None:
    (merged,) = joined(
        [post("p1", "x0", Stage.RECEIVE_INPUT)], [pre("q1", "p1", Stage.COMPOSE_REQUEST, at=3)]
    )
    assert isinstance(merged, StagePreFired)
    assert merged.id == "q1" and merged.causation_id == "x0"
    assert merged.data.stage is Stage.COMPOSE_REQUEST
    assert merged.data.previous == PreviousStage(
        stage=Stage.RECEIVE_INPUT, iteration=1, outcome="ok", ended_at=T0
    )
    same_time = joined([post("p1", "x0", Stage.SEND_REQUEST)], [pre("q1", "p1", Stage.RENDER)])
    assert same_time[0].data.previous.ended_at is None  # type: ignore[union-attr]


def test_a_post_that_no_pre_follows_at_once_stays_an_event() -> None:
    ending = [pre("q0", "x0", Stage.RECEIVE_INPUT), post("p1", "q0", Stage.RECEIVE_INPUT)]
    assert joined(ending, []) == tuple(ending)  # the decision ends: a hook waits
    between = [post("p1", "x0", Stage.STREAM_RESPONSE), called("c1", "p1")]
    between.append(pre("q1", "c1", Stage.TOOL_CALL))
    assert joined(between[:1], between[1:]) == tuple(between)
    uncaused = [post("p1", "x0", Stage.TOOL_CALL), pre("q1", "zz", Stage.COMPOSE_REQUEST)]
    assert joined(uncaused[:1], uncaused[1:]) == tuple(uncaused)
    lone_pre = [pre("q1", "x0", Stage.RECEIVE_INPUT)]
    assert joined([], lone_pre) == tuple(lone_pre)


def test_stages_of_two_turns_are_never_merged() -> None:
    events = [post("p1", "x0", Stage.RENDER, turn="turnA"), pre("q1", "p1", Stage.RECEIVE_INPUT)]
    assert joined(events[:1], events[1:]) == tuple(events)


# -- a step that closes a stage and goes on: `Builder.leave` ------------------------------


def _builder() -> Builder:
    turn = ActiveTurn("turn1", "i1", "c1", "trace1", "key1", None, "x0")
    return Builder("s1", turn, ctx(Ids("b")))


def test_a_stage_left_and_the_next_entered_at_once_are_one_event() -> None:
    b = _builder()
    b.leave(Stage.RECEIVE_INPUT)
    (entered,) = b.closed([b.pre(Stage.COMPOSE_REQUEST, iteration=1)])
    assert isinstance(entered, StagePreFired) and entered.causation_id == "x0"
    assert entered.data.stage is Stage.COMPOSE_REQUEST
    assert entered.data.previous == PreviousStage(
        stage=Stage.RECEIVE_INPUT, iteration=0, outcome="ok", ended_at=None
    )
    assert b.make(RenderEmitted, RenderEmittedData(text="x")).causation_id == entered.id


def test_a_close_that_something_else_follows_goes_first_as_its_own_event() -> None:
    b = _builder()
    b.leave(Stage.COMPOSE_REQUEST)
    left, ended = b.closed(b.fail(FailureClass.BUDGET_EXCEEDED, "over", "raise it"))
    assert isinstance(left, StagePostFired) and left.data.outcome == "ok"  # not a second close
    assert left.data.stage is Stage.COMPOSE_REQUEST and left.causation_id == "x0"
    assert isinstance(ended, TurnEnded) and ended.causation_id == left.id
    b = _builder()
    b.leave(Stage.STREAM_RESPONSE)
    made = b.make(RenderEmitted, RenderEmittedData(text="x"))
    left, rendered, entered = b.closed([made, b.pre(Stage.RENDER)])
    assert isinstance(left, StagePostFired) and rendered.causation_id == left.id
    assert isinstance(entered, StagePreFired) and entered.data.previous is None
    (alone,) = _left_alone()
    assert isinstance(alone, StagePostFired) and alone.causation_id == "x0"


def _left_alone() -> list[Event]:
    b = _builder()
    b.leave(Stage.STREAM_RESPONSE)
    return b.closed([])  # a hook waits at STOP


def test_unmerged_gives_back_the_two_events_a_merged_one_stands_for() -> None:
    events = [post("p1", "x0", Stage.TOOL_CALL, at=2), pre("q1", "p1", Stage.COMPOSE_REQUEST, at=5)]
    left, entered = unmerged(joined(events[:1], events[1:]))
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


def _run(replies: list[str], points: frozenset[HookPoint]) -> Shell:
    def go_on(subject: HookSubject, point: HookPoint) -> StageHookVerdict:
        return StageHookVerdict(point, "continue")

    hooks = {p: (lambda s, p=p: go_on(s, p)) for p in points}
    config = TurnConfig(tools=TOOLS, max_output_continuations=1)
    shell = Shell(config, hooks, [_reply(k, n) for n, k in enumerate(replies)])
    shell.ids = Ids("m")
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
    run = _run(replies, points)
    new = run.log
    old = unmerged(new)  # the log as written before schema version 2
    # each decision's events are stored merged, by the rule, and nothing is left to merge
    assert [merged_stages(unmerged(d)) for d in run.decisions] == run.decisions
    # a log written before (separate events) and one written now fold the same
    initial = SessionState.of("s1")
    assert fold(initial, old) == fold(initial, new) == run.state
    # the timeline people read is the same too
    assert build_view("s1", old).turns == build_view("s1", new).turns
    dropped = sum(1 for e in new if isinstance(e, StagePreFired) and e.data.previous)
    assert len(new) == len(old) - dropped


def test_a_one_tool_turn_decides_8_events_fewer() -> None:
    log = _run(["tools", "text"], frozenset()).log
    stages = [e for e in log if isinstance(e, StagePreFired | StagePostFired)]
    assert len([e for e in unmerged(log) if isinstance(e, StagePreFired | StagePostFired)]) == 18
    assert len(stages) == 10 and len(unmerged(log)) - len(log) == 8
    assert [e.type for e in stages].count("StagePostFired") == 1  # RENDER's, before TurnEnded


def test_the_cli_line_of_a_merged_event_says_both_the_stage_left_and_the_one_entered() -> None:
    from turnstream.cli.summaries import summarize

    (merged,) = joined([post("p1", "x0", Stage.TOOL_CALL)], [pre("q1", "p1", Stage.RENDER)])
    assert summarize(merged) == "TOOL_CALL ◂ ok · RENDER ▸ (round 1)"
    assert summarize(pre("q1", "p1", Stage.RENDER)) == "RENDER ▸ (round 1)"


def test_a_failure_closes_the_stage_the_step_stands_in_as_failed() -> None:
    b = _builder()  # the turn stands in RECEIVE_INPUT, open
    entered = b.pre(Stage.COMPOSE_REQUEST, iteration=1)
    closed, ended = b.fail(FailureClass.BUDGET_EXCEEDED, "over", "raise it")
    assert isinstance(closed, StagePostFired) and closed.causation_id == entered.id
    assert (closed.data.stage, closed.data.outcome) == (Stage.COMPOSE_REQUEST, "failed")
    assert isinstance(ended, TurnEnded)
    b = _builder()
    b.leave(Stage.RECEIVE_INPUT)
    (left, ended) = b.closed(b.fail(FailureClass.LIMIT_EXCEEDED, "bound", "raise it"))
    assert isinstance(left, StagePostFired) and left.data.outcome == "ok"
    assert isinstance(ended, TurnEnded)
