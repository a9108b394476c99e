"""The turn's phase (`core/turn/phases.py`): what a turn's events move it through, that an
ended turn is moved by nothing, and that every phase survives a snapshot."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.unit.factories import accepted, failure, run_turn, succeed, success
from turnstream.core.events import (
    ProviderRequestStarted,
    RequestChange,
    Stage,
    unmerged,
)
from turnstream.core.session import SessionState, evolve, fold, state_from_json, state_to_json
from turnstream.core.turn.phases import (
    AwaitingModel,
    CallingTools,
    Composing,
    Ended,
    ModelFailed,
    Phase,
    Receiving,
    Rendering,
    Requesting,
    Responded,
    Response,
    ToolCall,
)
from turnstream.core.turn.state import ActiveTurn

READ = ToolCall("c0", "read_file", {"path": "p0"})
ANSWER = Response((READ,), ("so far", "\n\n"))


def phases(state: SessionState, log: list) -> list[str]:
    """The phase after each event of `log` (a stage left and the next entered apart), each
    once in a row."""
    out: list[str] = []
    for event in unmerged(log):
        state = evolve(state, event)
        turn = state.chat.active
        if turn is not None:
            seen = f"{turn.phase.kind}{'' if turn.phase.open else '/closed'}"
            if not out or out[-1] != seen:
                out.append(seen)
    return out


def test_a_text_turn_walks_its_phases_in_order() -> None:
    start = fold(SessionState.of("s1"), [accepted(1, "hello")])
    _, log = run_turn(start, [success("hi there")])
    assert phases(start, log) == [
        "receiving/closed",
        "receiving",
        "receiving/closed",
        "composing",
        "composing/closed",
        "requesting",
        "awaiting_model",
        "awaiting_model/closed",
        "awaiting_model",  # STREAM_RESPONSE opened, the response not in yet
        "responded",
        "responded/closed",
        "rendering",
        "rendering/closed",
        "ended/closed",
    ]


def test_a_failed_model_call_fails_the_turn_from_its_own_phase() -> None:
    start = fold(SessionState.of("s1"), [accepted(1, "hello")])
    _, log = run_turn(start, [failure()])
    seen = phases(start, log)
    assert seen[-3:] == ["model_failed", "model_failed/closed", "ended/closed"]


def test_an_ended_turn_is_moved_by_no_late_event() -> None:
    start = fold(SessionState.of("s1"), [accepted(1, "hello")])
    _, log = run_turn(start, [success("hi")])
    ended_at = next(i for i, e in enumerate(log) if e.type == "TurnEnded")
    state = fold(start, log[: ended_at + 1])
    assert state.chat.active is not None and isinstance(state.chat.active.phase, Ended)
    late = next(e for e in log if isinstance(e, ProviderRequestStarted))
    after = evolve(state, late)
    assert after.chat.active is not None and after.chat.active.phase == state.chat.active.phase
    assert not after.chat.active.awaiting_provider  # no model call asked for an ended turn


@pytest.mark.parametrize(
    "phase",
    [
        Receiving(),
        Composing(open=False),
        Requesting(),
        AwaitingModel(Stage.STREAM_RESPONSE, open=False),
        ModelFailed("prompt_too_long: too long", veto="hook h: no"),
        Responded(),
        CallingTools(open=False),
        Requesting(open=False, change=RequestChange(model="small"), response=ANSWER),
        AwaitingModel(change=RequestChange(tools=["grep"])),
        Responded(open=False, response=ANSWER),
        CallingTools(asked=(READ,)),
        Rendering(open=True, rendered=True),
        Ended("failed", Stage.TOOL_CALL, reply_settled=True),
    ],
)
def test_every_phase_survives_a_snapshot(phase: Phase) -> None:
    state = SessionState.of("s1")
    turn = ActiveTurn("t1", "in1", "c1", "trace1", "key1", None, "e1", phase=phase)
    state = replace(state, chat=replace(state.chat, active=turn))
    assert state_from_json(state_to_json(state)) == state


def moves(start: SessionState, log: list) -> set[tuple[str, str]]:
    """Each change of the active turn's phase kind as `log` is folded onto `start`."""
    out: set[tuple[str, str]] = set()
    state = start
    for event in unmerged(log):
        before = state.chat.active
        state = evolve(state, event)
        after = state.chat.active
        if before is not None and after is not None and before.turn_id == after.turn_id:
            if before.phase.kind != after.phase.kind:
                out.add((before.phase.kind, after.phase.kind))
    return out


def test_a_turn_moves_only_to_the_successors_its_phase_names() -> None:
    """`SUCCESSORS` against what folding turns of every shape does: text, a failed model
    call, a continuation, a compaction after a prompt too long, tools, interrupts."""
    from tests.unit.factories import Ids, interrupt
    from tests.unit.test_turn_tools import CONFIG, Driver, approve
    from turnstream.core.turn import ProviderFailure
    from turnstream.core.turn.phases import SUCCESSORS

    seen: set[tuple[str, str]] = set()
    one = fold(SessionState.of("s1"), [accepted(1, "hello")])
    for replies in (
        [success("hi")],
        [failure()],
        [success("part one, ", "max_tokens"), success("part two")],
    ):
        seen |= moves(one, run_turn(one, replies)[1])
    state, _ = run_turn(fold(SessionState.of("s1"), [accepted(1, "first " * 50)]), [success()])
    state = fold(state, [accepted(2, "second")])
    too_long = ProviderFailure("prompt_too_long", "too long", False, success().finished_at)
    seen |= moves(state, run_turn(state, [too_long, success("two")], ids=Ids("z"))[1])
    for stop in (None, "hard", "graceful"):
        d = Driver(CONFIG, "read_file", "grep")
        d.feed(approve(d.inv(0)), approve(d.inv(1)))
        if stop is not None:
            d.feed(interrupt(stop))
        d.feed(succeed(d.inv(0)), succeed(d.inv(1)))
        seen |= moves(one, d.log)
    assert {("awaiting_model", "model_failed"), ("calling_tools", "composing")} <= seen
    assert ("model_failed", "requesting") in seen or ("model_failed", "awaiting_model") in seen
    strays = {(a, b) for a, b in seen if b != "ended" and b not in SUCCESSORS[a]}
    assert not strays, f"moves the phases do not name: {sorted(strays)}"
