"""The session's fold batched (`evolve_all`: one copy of the session per run of events its
chat alone takes) and its chat deciding on the chat alone (`chat_steps`) give exactly what
folding and deciding event by event gives, over the real event sequences the unit tests
of the turn, tools, workflows, sub-turns and hooks produce: the tests are run once with
every session fold, decision and chat step they make recorded, then each recorded one is
done again the slow way and compared."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial, reduce
from types import ModuleType
from typing import Any

import pytest

from tests.unit import (
    test_budget,
    test_context_core,
    test_fallback,
    test_interceptors,
    test_request_manifest,
    test_runner_approval,
    test_stage_merge,
    test_storage_refused,
    test_subturns,
    test_turn,
    test_turn_phases,
    test_turn_tools,
    test_workflow_run,
)
from tests.unit.factories import Ids
from turnstream.core.events import Event
from turnstream.core.fold import Decision, until_quiet
from turnstream.core.inputs import Fact
from turnstream.core.session import decider, run
from turnstream.core.session.fold import SESSION_KINDS, evolve, evolve_all
from turnstream.core.session.state import SessionState
from turnstream.core.turn import Context, TurnConfig

SOURCES = (
    test_turn,
    test_turn_tools,
    test_turn_phases,
    test_workflow_run,
    test_subturns,
    test_storage_refused,
    test_stage_merge,
    test_budget,
    test_fallback,
    test_interceptors,
    test_context_core,
    test_request_manifest,
    test_runner_approval,
)
"""The unit tests whose sessions are harvested: every test of these modules that takes no
argument (a fixture or a parameter) and is not a coroutine."""

Fold = Callable[[SessionState, Iterable[Event]], SessionState]


@dataclass
class Harvest:
    folds: list[tuple[SessionState, tuple[Event, ...]]] = field(default_factory=list)
    decisions: list[tuple[SessionState, Any, Decision[SessionState, Any]]] = field(
        default_factory=list
    )
    chat_steps: list[tuple[SessionState, TurnConfig, Context]] = field(default_factory=list)
    tests: int = 0


def one_by_one(state: SessionState, events: Iterable[Event]) -> SessionState:
    """The session's fold as it was: `evolve` of each event in order."""
    return reduce(evolve, events, state)


def _replaced_everywhere(mp: pytest.MonkeyPatch, original: object, by: object) -> None:
    """`original` replaced by `by` wherever a module of the project or its tests holds it
    (each importer binds its own name), but here."""
    for module in list(sys.modules.values()):
        name = getattr(module, "__name__", "")
        if not isinstance(module, ModuleType) or not name.startswith(("turnstream", "tests")):
            continue
        if name == __name__:
            continue
        for attr, value in list(vars(module).items()):
            if value is original:
                mp.setattr(module, attr, by)


def _tests(module: ModuleType) -> Iterator[Callable[[], None]]:
    for name, test in vars(module).items():
        if name.startswith("test_") and callable(test) and test.__module__ == module.__name__:
            if not inspect.signature(test).parameters and not inspect.iscoroutinefunction(test):
                yield test


@pytest.fixture(scope="module")
def harvest() -> Harvest:
    got = Harvest()

    def folding(state: SessionState, events: Iterable[Event]) -> SessionState:
        events = tuple(events)
        got.folds.append((state, events))
        return evolve_all(state, events)

    decide = decider.decide_session

    def deciding(state: SessionState, item: Any, config: TurnConfig, ctx: Context) -> Any:
        decision = decide(state, item, config, ctx)
        got.decisions.append((state, item, decision))
        return decision

    steps = run.chat_steps

    def stepping(state: SessionState, config: TurnConfig, ctx: Context) -> Any:
        got.chat_steps.append((state, config, ctx))
        return steps(state, config, ctx)

    with pytest.MonkeyPatch.context() as mp:
        _replaced_everywhere(mp, evolve_all, folding)
        _replaced_everywhere(mp, decide, deciding)
        _replaced_everywhere(mp, steps, stepping)
        for module in SOURCES:
            for test in _tests(module):
                test()
                got.tests += 1
    return got


def mismatches(batch: Fold, folds: Sequence[tuple[SessionState, tuple[Event, ...]]]) -> int:
    """How many of `folds` `batch` folds otherwise than event by event: the whole batch, or
    split in two (a decision folds from where the last one left): at every point of a
    short batch, at its ends and middle for a long one."""
    wrong = 0
    for state, events in folds:
        expected = one_by_one(state, events)
        n = len(events)
        cuts = range(1, n) if n <= 12 else (1, n // 2, n - 1)
        splits = (batch(batch(state, events[:k]), events[k:]) for k in cuts)
        wrong += any(got != expected for got in (batch(state, events), *splits))
    return wrong


def caught(batch: Fold, folds: Sequence[tuple[SessionState, tuple[Event, ...]]]) -> bool:
    """`batch` folds one of `folds` otherwise than event by event."""
    return any(batch(state, events) != one_by_one(state, events) for state, events in folds)


def test_the_harvest_holds_what_the_batches_turn_on(harvest: Harvest) -> None:
    assert harvest.tests > 120
    kinds = {type(e).__name__ for _, events in harvest.folds for e in events}
    # the session's own kinds end a run of the chat's: they must be there, runs between them
    for kind in ("InputAccepted", "SessionTurnEnd", "ToolCallModeInvoked", "SubTurnSpawned"):
        assert kind in kinds
    for kind in ("WorkflowAttached", "StageEntered", "StageExited", "WorkflowExit"):
        assert kind in kinds  # with a run attached, every event is the session's
    mixed = [
        events
        for _, events in harvest.folds
        if len({type(e) in SESSION_KINDS for e in events}) == 2 and len(events) > 3
    ]
    assert len(mixed) > 50
    assert len(harvest.decisions) > 500 and len(harvest.chat_steps) > 500


def test_the_batch_fold_is_the_fold_of_each_event_in_order(harvest: Harvest) -> None:
    assert mismatches(evolve_all, harvest.folds) == 0


def test_a_batch_fold_that_drops_or_reorders_an_event_is_caught(harvest: Harvest) -> None:
    def dropping(at: int) -> Fold:
        return lambda state, events: evolve_all(state, [*events][:at] + [*events][at + 1 :])

    def swapping(state: SessionState, events: Iterable[Event]) -> SessionState:
        first, *rest = [*events] or [None]
        return evolve_all(state, [*rest[:1], first, *rest[1:]] if first else [])

    assert not caught(evolve_all, harvest.folds)
    for broken in (dropping(0), dropping(1), dropping(-1), swapping):
        assert caught(broken, harvest.folds)


def test_each_decision_s_state_is_the_fold_of_its_events_one_by_one(harvest: Harvest) -> None:
    for state, item, decision in harvest.decisions:
        fact = [item.event] if isinstance(item, Fact) else []
        assert decision.state == one_by_one(state, [*fact, *decision.events])


def test_the_chat_s_steps_are_those_the_session_takes_step_by_step(harvest: Harvest) -> None:
    """`chat_steps` (the chat deciding alone while the session has nothing of its own in
    its steps) against `until_quiet` of the session's step, folded event by event."""
    for state, config, ctx in harvest.chat_steps:
        fresh = partial(Context, now=ctx.now, source=ctx.source)
        got = run.chat_steps(state, config, fresh(new_id=Ids()))
        step = partial(run._chat_step, config=config, ctx=fresh(new_id=Ids()))
        expected = until_quiet(state, step, one_by_one)
        assert (got.events, got.state) == (expected.events, expected.state)
