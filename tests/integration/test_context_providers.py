"""Context providers end to end: built-in, in-process and remote (NATS request/reply)
providers on a real nats-server, the model called through the official SDK against the
Anthropic wire fake. What they said is in the log and in the request the model got; the
slow and the broken ones are skipped with a warning; a replay composes the same request."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from tests.integration.conftest import anthropic_settings, running_services, settings_for
from tests.providers.fake_servers import FakeAnthropic, Text
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.client import message_command, send_and_wait
from turnstream.context import ContextRegistry, ContextSpec
from turnstream.core.events import ContextProvided, ContextSkipped
from turnstream.core.session import SessionState, fold
from turnstream.core.turn import compose_request
from turnstream.core.turn.context import ContextRequest
from turnstream.settings import ContextProviderSetting, ContextSettings


async def slow(_: ContextRequest) -> str:
    await asyncio.sleep(5)
    return "too late"


async def broken(_: ContextRequest) -> str:
    raise RuntimeError("the team directory is down")


async def chatty(request: ContextRequest) -> str:
    return f"ticket for {request.input}: " + "x" * 400


async def test_providers_add_context_to_every_request_and_the_log(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "AGENTS.md").write_text("# Rules\nAnswer in French.\n")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")

    async def answer(msg: object) -> None:
        asked = orjson.loads(msg.data)  # type: ignore[attr-defined]
        reply = {"content": f"On call for {asked['sessionId']}: Ana."}
        await msg.respond(orjson.dumps(reply))  # type: ignore[attr-defined]

    sub = await bus.nc.subscribe("ctx.oncall", cb=answer)
    providers = {
        "agents_md": ContextProviderSetting(priority=1),
        "datetime": ContextProviderSetting(priority=2),
        "summary": ContextProviderSetting(priority=3),
        "oncall": ContextProviderSetting(subject="ctx.oncall", priority=4),
        "nobody": ContextProviderSetting(subject="ctx.nobody", priority=5, timeout_ms=200),
    }
    async with FakeAnthropic([Text("Bonjour."), Text("Encore.")]) as fake:
        settings = anthropic_settings(
            nats_server,
            tmp_path,
            fake.base_url,
            system_prompt="Be brief.",
            context=ContextSettings(providers=providers),
        )
        extra = [
            (ContextSpec("slow", priority=6, timeout_ms=100), slow),
            (ContextSpec("broken", priority=7), broken),
            (ContextSpec("chatty", priority=8, max_tokens=20), chatty),
        ]
        clock = lambda: datetime(2026, 11, 23, 12, 0, tzinfo=UTC)  # noqa: E731
        context = ContextRegistry.load(settings, bus.nc, extra=extra, clock=clock)
        async with running_services(settings, bus, context=context):
            first = await send_and_wait(bus, message_command("ctx-1", "hello"), timeout=20)
            second = await send_and_wait(bus, message_command("ctx-1", "again"), timeout=20)
    await sub.unsubscribe()
    assert first.status == second.status == "completed", (first, second)
    events = [s.event for s in await bus.store.read_session("ctx-1")]
    provided = [e.data for e in events if isinstance(e, ContextProvided)]
    skipped = [e.data for e in events if isinstance(e, ContextSkipped)]
    # per turn, in priority order: nothing from `summary` before any compaction
    assert [p.provider for p in provided] == ["agents_md", "datetime", "oncall", "chatty"] * 2
    assert provided[2].content == "On call for ctx-1: Ana."
    assert provided[1].content == "Current date and time: 2026-11-23T12:00:00Z (Monday)."
    assert provided[3].truncated and provided[3].tokens == 20
    assert all(p.digest.startswith("sha256:") for p in provided)
    assert [(s.provider, s.timed_out) for s in skipped][:3] == [
        ("nobody", False),
        ("slow", True),
        ("broken", False),
    ]
    assert "the team directory is down" in skipped[2].reason
    # the model got it in the system prompt, the configured one first: its own text and the
    # context as two blocks, each a prompt-cache breakpoint (docs/costs.md)
    blocks = fake.requests[0].body["system"]
    assert blocks[0]["text"] == "Be brief." and len(blocks) == 2
    assert all(b["cache_control"] == {"type": "ephemeral"} for b in blocks)
    system = "".join(b["text"] for b in blocks)
    assert system.startswith('Be brief.\n\n<context provider="agents_md">')
    assert "Answer in French." in system and "On call for ctx-1: Ana." in system
    # a replay composes the same request from the log alone
    started = next(i for i, e in enumerate(events) if e.type == "ProviderRequestStarted")
    state = fold(SessionState.of("ctx-1"), events[: started + 1])
    config = replace(settings.turn_config(), context_providers=True)
    assert compose_request(state.chat, config).system == system


async def test_a_remote_provider_registers_at_runtime_in_the_hooks_bucket(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path
) -> None:
    (tmp_path / "workspace").mkdir()

    async def answer(msg: object) -> None:
        await msg.respond(orjson.dumps({"content": "Team: platform."}))  # type: ignore[attr-defined]

    sub = await bus.nc.subscribe("ctx.team", cb=answer)
    kv = await bus.js.key_value(bus.subjects.hooks_bucket)
    settings = settings_for(nats_server, tmp_path)
    async with running_services(settings, bus):
        before = await send_and_wait(bus, message_command("ctx-2", "one"), timeout=20)
        await kv.put("context.team", orjson.dumps({"subject": "ctx.team", "maxTokens": 50}))
        await asyncio.sleep(0.5)  # the runner's watch hands it over
        after = await send_and_wait(bus, message_command("ctx-2", "two"), timeout=20)
        await kv.delete("context.team")
        await asyncio.sleep(0.5)
        gone = await send_and_wait(bus, message_command("ctx-2", "three"), timeout=20)
    await sub.unsubscribe()
    assert before.status == after.status == gone.status == "completed"
    events = [s.event for s in await bus.store.read_session("ctx-2")]
    provided = [(e.turn_id, e.data.content) for e in events if isinstance(e, ContextProvided)]
    assert provided == [(after.turn_id, "Team: platform.")]
