"""What a turn does once a stage has closed, decided in the step that closes it.

A step that closes a stage (`Builder.leave`) goes on at once with what the next step would
decide from the closed phase (`onward`): nothing can come between. The step took any
waiting input, end or bound before it closed the stage, and a closed phase has no hook
point but STOP after the response. So a stage left and the next entered are one event
(`StagePreFired.previous`), made as one and folded once:

    closed            onward
    RECEIVE_INPUT     COMPOSE_REQUEST (or the turn's bound)
    COMPOSE_REQUEST   SEND_REQUEST (or the budget's end)
    STREAM_RESPONSE   a stage's completion check | TOOL_CALL | another round | STOP | RENDER
    TOOL_CALL         another round (or the summary of an interrupted turn: RENDER)
    RENDER            TurnEnded{completed}
    SEND_REQUEST      the model's response records STREAM_RESPONSE itself (`answers`)
"""

from __future__ import annotations

from typing import assert_never

from turnstream.core.costs import model_key
from turnstream.core.events import Event, FailureClass, Stage, StageCompletionChecked
from turnstream.core.turn.budget import over_budget
from turnstream.core.turn.builder import Builder
from turnstream.core.turn.completion import check_response
from turnstream.core.turn.hooks import HookPoint
from turnstream.core.turn.state import ActiveTurn, ChatState, TurnConfig
from turnstream.core.turn.steps import compose_or_stop, compose_request, continues, request_model


def leave(b: Builder, stage: Stage, state: ChatState, config: TurnConfig) -> list[Event]:
    """`stage` closed ok, and what the turn does at once after it."""
    b.leave(stage)
    return b.closed(onward(b, stage, state, config))


def onward(b: Builder, stage: Stage, state: ChatState, config: TurnConfig) -> list[Event]:
    """What the active turn does once `stage` is closed ([]: it waits, for STOP's hooks)."""
    turn = b.turn
    match stage:
        case Stage.RECEIVE_INPUT:
            return compose_or_stop(b, turn, config)
        case Stage.COMPOSE_REQUEST:
            return over_budget_end(b, state, config) or [b.pre(Stage.SEND_REQUEST)]
        case Stage.STREAM_RESPONSE:
            if would_stop(turn, config):  # STOP's hook point: its hooks, or RENDER
                return [] if HookPoint.STOP in config.stage_hooks else [b.pre(Stage.RENDER)]
            return _responded(b, turn, config)
        case Stage.TOOL_CALL:
            if turn.interrupt is not None and turn.iteration > turn.interrupt.round:
                return [b.pre(Stage.RENDER)]  # the summary round is done: no more rounds
            return compose_or_stop(b, turn, config)
        case Stage.RENDER:
            return [b.end("completed", reply=turn.reply)]
        case Stage.SEND_REQUEST:
            return []
        case _:
            assert_never(stage)


def would_stop(turn: ActiveTurn, config: TurnConfig) -> bool:
    """The model answered without tool calls and the turn would render now: a stop hook
    may ask for another round, while the turn has rounds left (not a workflow stage's Act,
    not an interrupted turn's summary)."""
    return (
        config.stage is None
        and not turn.requested_calls
        and not continues(turn, config)
        and turn.interrupt is None
        and turn.iteration < config.max_iterations
    )


def _responded(b: Builder, turn: ActiveTurn, config: TurnConfig) -> list[Event]:
    """The model's response is in: a stage judges it, calls are made, the model goes on,
    or the turn renders."""
    spec = config.stage
    if spec is not None and spec.act.checked < turn.iteration:
        checked = check_response(spec, turn.requested_calls, turn.iteration)
        if checked is not None and turn.interrupt is not None and not checked.parsed:
            # a graceful interrupt mid-Act: no completion is asked for any more; the
            # summary round's answer ends the Act
            if turn.iteration > turn.interrupt.round:
                stopped = checked.model_copy(
                    update={"outcome": "interrupted", "call_ids": [], "detail": None}
                )
                return [b.make(StageCompletionChecked, stopped)]
            checked = None
        if checked is not None:
            return [b.make(StageCompletionChecked, checked)]
    if spec is not None and not turn.requested_calls:
        return compose_or_stop(b, turn, config)
    if turn.requested_calls:
        return [b.pre(Stage.TOOL_CALL)]
    if continues(turn, config):
        return compose_or_stop(b, turn, config)
    return [b.pre(Stage.RENDER)]  # past its last round (or interrupted): no stop hook


def over_budget_end(b: Builder, state: ChatState, config: TurnConfig) -> list[Event]:
    """The turn's end when its next model call could take it or its session over a budget;
    [] when the call may go (or there is no budget)."""
    turn = state.active
    if not config.budget or turn is None:
        return []
    key = model_key(*request_model(turn, config))
    request = compose_request(state, config)
    session = config.session_spent if config.session_spent is not None else state.spent
    over = over_budget(config.budget, turn.spent, session, request, key, config.prices)
    if over is None:
        return []
    reason, next_action = over
    return b.fail(FailureClass.BUDGET_EXCEEDED, reason, next_action)
