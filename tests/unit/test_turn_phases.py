"""The turn's phase (`core/turn/phases.py`): what a turn's events move it through, that an
ended turn is moved by nothing, and that every phase survives a snapshot."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.unit.factories import accepted, failure, run_turn, success
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
