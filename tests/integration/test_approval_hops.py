"""Who decides a tool call, over a real nats-server with every service running: the
turn-runner judges a call that needs no person in the decision that proposes it (no hop to
the approval service); the approval service still asks a person when one is needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.conftest import events_of, only, running_services, settings_for
from tests.integration.test_tools_path import ROUND_TRIP, answer_prompts, registry, script
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.client import message_command, send_and_wait
from turnstream.core.events import (
    InteractionRequested,
    ToolCallApproved,
    ToolCallModeInvoked,
    ToolInvocationSucceeded,
)


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "notes.txt").write_text("the secret word is turnip\n")
    return tmp_path


async def test_an_auto_call_is_judged_by_the_runner_in_the_batch_that_proposes_it(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path
) -> None:
    settings = settings_for(nats_server, tmp, script=script(tmp, *ROUND_TRIP))
    async with running_services(settings, bus, tools=registry()):
        outcome = await send_and_wait(bus, message_command("hops", "read my notes"), timeout=15)
    assert outcome.status == "completed" and "turnip" in (outcome.reply or "")
    stored = await bus.store.read_session("hops")
    kinds = [s.event.type for s in stored]
    at = kinds.index("ToolInvocationProposed")
    assert kinds[at : at + 4] == [
        "ToolInvocationProposed",
        "ToolCallModeInvoked",
        "ToolCallApproved",
        "ToolInvocationRequested",
    ]
    batch = [s.event for s in stored[at : at + 4]]
    assert len({e.source for e in batch}) == 1 and batch[0].source.startswith("turn-runner")
    (invoked,) = only([s.event for s in stored], ToolCallModeInvoked)
    assert invoked.data.mode == "auto" and invoked.data.verdict == "approve"
    (approved,) = only([s.event for s in stored], ToolCallApproved)
    assert approved.data.authority == "mode"
    assert not any(s.event.source.startswith("approval") for s in stored)


async def test_an_ask_call_is_left_to_the_approval_service_which_prompts_once(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path
) -> None:
    replies = (*ROUND_TRIP[:1], '{text: "tool said: {last_tool_result}"}')
    settings = settings_for(nats_server, tmp, script=script(tmp, *replies), security_mode="ask")
    seen: list = []
    async with running_services(settings, bus, tools=registry()):
        await answer_prompts(bus, "asked", "approve", seen)
        outcome = await send_and_wait(bus, message_command("asked", "x"), timeout=15)
    assert outcome.completed and "turnip" in (outcome.reply or "") and len(seen) == 1
    events = await events_of(bus, "asked")
    (invoked,) = only(events, ToolCallModeInvoked)
    assert invoked.data.verdict == "ask" and invoked.source.startswith("turn-runner")
    (prompt,) = only(events, InteractionRequested)
    (approved,) = only(events, ToolCallApproved)
    assert prompt.source.startswith("approval") and approved.source.startswith("approval")
    assert approved.data.authority == "interaction"
    assert only(events, ToolInvocationSucceeded)


async def test_the_runner_does_not_decide_its_own_verdict_again_when_it_is_delivered(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from turnstream.core.inputs import Fact
    from turnstream.turn_runner.session import SessionActor

    decided: list[str] = []
    run = SessionActor.run

    async def counting(self: SessionActor, item: object) -> None:
        if isinstance(item, Fact):
            decided.append(item.event.type)
        await run(self, item)  # type: ignore[arg-type]

    monkeypatch.setattr(SessionActor, "run", counting)
    settings = settings_for(nats_server, tmp, script=script(tmp, *ROUND_TRIP))
    async with running_services(settings, bus, tools=registry()):
        outcome = await send_and_wait(bus, message_command("own", "read my notes"), timeout=15)
    assert outcome.status == "completed"
    assert "ToolInvocationSucceeded" in decided  # the executor's result is a fact it decides
    assert "ToolCallApproved" not in decided  # its own verdict, folded when it judged it
