"""Context providers, decided: the turn waits for its context once, records each answer
(or skip), and every request of the turn carries it; a replay needs no provider. No I/O."""

from __future__ import annotations

from dataclasses import replace

from tests.unit.factories import Ids, accepted, ctx, fact, success
from turnstream.core.events import (
    Attachment,
    ContextCompacted,
    ContextCompactedData,
    ContextProvided,
    Event,
)
from turnstream.core.immutable import with_changes
from turnstream.core.inputs import Tick
from turnstream.core.session import SessionState, fold
from turnstream.core.session.decider import ProviderDone, decide_session
from turnstream.core.turn import TurnConfig, compose_request
from turnstream.core.turn.context import (
    ContextGathered,
    Contributed,
    GatherContext,
    Skipped,
    running_summary,
)
from turnstream.core.turn.state import Message

CONFIG = TurnConfig(system_prompt="Be brief.", context_providers=True, max_output_continuations=1)


def start() -> tuple[SessionState, list[Event], GatherContext]:
    c = ctx(Ids())
    state = fold(SessionState.of("s1"), [accepted(1, "what is in AGENTS.md?")])
    decision = decide_session(state, Tick(), CONFIG, c)
    (gather,) = [e for e in decision.effects if isinstance(e, GatherContext)]
    return decision.state, list(decision), gather


def test_a_turn_waits_at_compose_request_for_its_context_then_carries_it() -> None:
    state, log, gather = start()
    assert log[-1].type == "StagePreFired" and log[-1].data.stage == "COMPOSE_REQUEST"
    assert gather.request.input == "what is in AGENTS.md?" and gather.request.summary == ""
    results = (
        Contributed("agents_md", "Use tabs."),
        Skipped("slow", "no answer within 50 ms", timed_out=True),
        Contributed("empty", ""),
        Contributed("datetime", "Now: 2026-01-01T00:00:00Z", truncated=True, volatile=True),
    )
    decision = decide_session(
        state, ContextGathered(gather.request.turn_id, results), CONFIG, ctx(Ids("b"))
    )
    kinds = [e.type for e in decision]
    assert kinds[:4] == ["ContextProvided", "ContextSkipped", "ContextProvided", "StagePreFired"]
    left = decision[3].data.previous  # COMPOSE_REQUEST's end, carried by SEND_REQUEST's start
    assert left is not None and left.stage == "COMPOSE_REQUEST" and left.outcome == "ok"
    provided = [e for e in decision if isinstance(e, ContextProvided)]
    assert provided[0].data.tokens == 3 and provided[0].data.digest.startswith("sha256:")
    assert provided[1].data.truncated
    assert not any(isinstance(e, GatherContext) for e in decision.effects)
    request = compose_request(decision.state.chat, CONFIG)
    assert request.system == 'Be brief.\n\n<context provider="agents_md">\nUse tabs.\n</context>'
    # the time changes every turn: it goes to the request's end, after the cacheable prefix
    assert provided[1].data.volatile and not provided[0].data.volatile
    assert (
        request.volatile == '<context provider="datetime">\nNow: 2026-01-01T00:00:00Z\n</context>'
    )
    # a replay folds the log: the same request, no provider asked
    replayed = fold(SessionState.of("s1"), [accepted(1, "what is in AGENTS.md?"), *log, *decision])
    again_composed = compose_request(replayed.chat, CONFIG)
    assert (again_composed.system, again_composed.volatile) == (request.system, request.volatile)
    # the turn's next request carries it too, and asks no provider again
    done = decide_session(
        decision.state,
        ProviderDone(gather.request.turn_id, success("part", "max_tokens")),
        CONFIG,
        ctx(Ids("c")),
    )
    assert not any(isinstance(e, GatherContext) for e in done.effects)
    (again,) = [r for e in done.effects for r in getattr(e, "calls", ())]
    assert again.iteration == 2 and again.system == request.system
    assert again.volatile == request.volatile
    # a late or repeated answer records nothing
    assert (
        list(
            decide_session(
                done.state, ContextGathered(gather.request.turn_id, results), CONFIG, ctx()
            )
        )
        == []
    )


def test_without_providers_nothing_waits() -> None:
    config = replace(CONFIG, context_providers=False)
    state = fold(SessionState.of("s1"), [accepted(1)])
    decision = decide_session(state, Tick(), config, ctx())
    assert "ProviderRequestStarted" in [e.type for e in decision]
    assert not any(isinstance(e, GatherContext) for e in decision.effects)


def _compacted(dropped: int, turn: str) -> ContextCompacted:
    """The runner's record of a compaction of turn `turn` that dropped `dropped` messages."""
    data = {"dropped_messages": dropped, "tokens_before": 100, "tokens_after": 10}
    compacted: ContextCompacted = fact(ContextCompacted, ContextCompactedData, turn, **data)
    return compacted


def test_compaction_keeps_a_running_summary_of_what_it_dropped() -> None:
    dropped = (Message("user", "first question " * 30), Message("assistant", "first answer"))
    summary = running_summary("", dropped)
    assert summary.startswith("- user: first question") and summary.endswith(
        "- assistant: first answer"
    )
    assert len(summary.splitlines()[0]) <= 210
    state, _, _ = start()
    assert state.chat.active is not None
    active = with_changes(state.chat.active, history_start=2)
    chat = with_changes(state.chat, history=(*dropped, *state.chat.history), active=active)
    state = with_changes(state, chat=chat)
    after = fold(state, [_compacted(2, "turn1")])
    assert after.chat.summary == summary and [m.text for m in after.chat.history] == [
        "what is in AGENTS.md?"
    ]


def test_a_request_names_the_attachments_its_history_holds_until_compaction_drops_them() -> None:
    photo = Attachment(name="a.png", media_type="image/png", size=3, sha256="a" * 64)
    first = accepted(1, "look")
    first = first.model_copy(
        update={"data": first.data.model_copy(update={"attachments": [photo]})}
    )
    config = replace(CONFIG, context_providers=False)
    state = fold(SessionState.of("s1"), [first])
    state = decide_session(state, Tick(), config, ctx(Ids("a"))).state
    state = decide_session(state, ProviderDone("turn1", success("a cat")), config, ctx()).state
    state = decide_session(fold(state, [accepted(2, "and now?")]), Tick(), config, ctx()).state
    assert state.chat.attachments == (photo,)
    assert compose_request(state.chat, config).attachments == (photo,)
    assert state.chat.active is not None and state.chat.active.history_start == 2
    kept = fold(state, [_compacted(0, "turn2")])
    assert compose_request(kept.chat, config).attachments == (photo,)
    dropped = fold(
        state, [_compacted(2, "turn2")]
    )  # the first turn's messages, the photo's with them
    assert [m.text for m in dropped.chat.history] == ["and now?"]
    assert compose_request(dropped.chat, config).attachments == ()


def test_a_runner_restarted_while_a_turn_waits_for_context_asks_again() -> None:
    _, log, gather = start()
    reloaded = fold(SessionState.of("s1"), [accepted(1, "what is in AGENTS.md?"), *log])
    again = decide_session(reloaded, Tick(), CONFIG, ctx(Ids("r")))
    assert list(again) == []  # nothing new to record: the turn still waits
    assert [e for e in again.effects if isinstance(e, GatherContext)] == [gather]
