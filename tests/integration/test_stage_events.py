"""Stage transitions over the real stack (schema version 2): a stage left and the next one
entered at once are one stored event; observers still hear both points; a log written
before (separate events, version 1) still folds, replays and verifies."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from unittest.mock import patch

import pytest

from tests.integration.conftest import events_of, running_services, settings_for
from tests.integration.test_tools_path import ROUND_TRIP, registry, script
from tests.polling import eventually
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.client import live_state, message_command, replay_session, send_and_wait
from turnstream.core.events import (
    Event,
    StagePostFired,
    StagePreFired,
    unmerged,
)
from turnstream.core.session import SessionState, fold, state_from_json
from turnstream.hooks import HookCall, HookRegistry, HookReply, HookSpec

STAGES = ("RECEIVE_INPUT", "COMPOSE_REQUEST", "SEND_REQUEST", "STREAM_RESPONSE", "RENDER")


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "notes.txt").write_text("the secret word is turnip\n")
    return tmp_path


def of_turn(events: Sequence[Event], turn_id: str) -> list[Event]:
    return [e for e in events if e.turn_id == turn_id]


def stage_events(events: Sequence[Event]) -> list[Event]:
    return [e for e in events if isinstance(e, StagePreFired | StagePostFired)]


def brackets(events: Sequence[Event]) -> list[tuple[str, str]]:
    """Each stage event as (kind, stage), merged ones as the two they stand for."""
    return [(e.type, e.data.stage.value) for e in stage_events(unmerged(events))]  # type: ignore[union-attr]


async def test_a_one_tool_turn_stores_25_events_and_a_text_turn_13(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path
) -> None:
    settings = settings_for(nats_server, tmp, script=script(tmp, *ROUND_TRIP, '{text: "bye"}'))
    async with running_services(settings, bus, tools=registry()):
        tool = await send_and_wait(bus, message_command("counted", "read my notes"), timeout=15)
        text = await send_and_wait(bus, message_command("counted", "thanks"), timeout=15)
        await asyncio.sleep(0.2)  # the runner's SessionTurnEnd follows the reply
    assert tool.completed and text.completed
    events = await events_of(bus, "counted")
    one_tool, text_turn = of_turn(events, tool.turn_id), of_turn(events, text.turn_id)
    assert len(one_tool) == 25 and len(stage_events(one_tool)) == 10
    assert len(text_turn) == 13 and len(stage_events(text_turn)) == 6
    # every stage is still entered and left, in order, as before
    assert brackets(text_turn) == [
        (k, s) for s in STAGES for k in ("StagePreFired", "StagePostFired")
    ]
    assert len(brackets(one_tool)) == 18
    assert ("StagePostFired", "TOOL_CALL") in brackets(one_tool)
    (render_end,) = [e for e in text_turn if isinstance(e, StagePostFired)]
    assert render_end.data.stage == "RENDER"  # the last stage's end stands alone
    assert text_turn[text_turn.index(render_end) + 1].type == "TurnEnded"


async def test_observer_hooks_hear_a_stage_left_and_the_next_entered(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path
) -> None:
    seen: list[tuple[str, str, str]] = []

    async def observer(call: HookCall) -> HookReply:
        assert call.event is not None
        seen.append((call.point, call.stage, call.event["type"]))
        return HookReply(action="continue")

    specs = [
        HookSpec(name=f"watch-{p}", stage="*", point=p, kind="observer") for p in ("pre", "post")
    ]
    hooks = HookRegistry([(spec, observer) for spec in specs])
    settings = settings_for(nats_server, tmp, script=script(tmp, *ROUND_TRIP))
    async with running_services(settings, bus, tools=registry(), hooks=hooks):
        outcome = await send_and_wait(bus, message_command("heard", "x"), timeout=15)
        await eventually(lambda: len(seen) >= 18)  # observers run as tasks after the turn
        await asyncio.sleep(0.3)  # and any (wrong) extra call with them
    assert outcome.completed
    events = await events_of(bus, "heard")
    assert any(isinstance(e, StagePreFired) and e.data.previous for e in events)
    expected = sorted(
        ("pre" if k == "StagePreFired" else "post", stage, k) for k, stage in brackets(events)
    )
    assert sorted(seen) == expected  # one call per point, each with the event it stands for
    assert len(seen) == 18


async def test_a_log_written_before_still_folds_replays_and_verifies(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path
) -> None:
    settings = settings_for(nats_server, tmp, script=script(tmp, *ROUND_TRIP, '{text: "again"}'))

    def as_version_1(recorded: Sequence[Event], followed: Sequence[Event]) -> tuple[Event, ...]:
        """What a runner of schema version 1 decided: the stage events separate."""
        events = unmerged([*recorded, *followed])
        return tuple(e.model_copy(update={"schema_version": 1}) for e in events)

    with patch("turnstream.core.session.decider.joined", as_version_1):
        async with running_services(settings, bus, tools=registry()):
            first = await send_and_wait(bus, message_command("legacy", "read"), timeout=15)
            await asyncio.sleep(0.2)
    assert first.completed
    old = await events_of(bus, "legacy")
    assert len(stage_events(old)) == 18 and all(e.schema_version == 1 for e in stage_events(old))
    # a new runner reads the old log, runs a turn on it, and its state is the log's
    async with running_services(settings, bus, tools=registry()):
        second = await send_and_wait(bus, message_command("legacy", "again"), timeout=15)
        for _ in range(50):
            replayed = await replay_session(bus, "legacy")
            live = state_from_json(await live_state(bus, "legacy"))
            if live == replayed.state:
                break
            await asyncio.sleep(0.02)
    assert second.completed and second.reply == "again"
    assert live == replayed.state  # `turnstream replay --verify`
    new = of_turn(replayed.events, second.turn_id)
    assert any(isinstance(e, StagePreFired) and e.data.previous for e in new)
    assert replayed.state.chat.turns_ended == 2
    assert fold(SessionState.of("legacy"), unmerged(replayed.events)) == replayed.state
