"""The fallback model end to end: the official SDKs against the provider wire fakes, a real
nats-server, every service. The primary answers 529 overloaded until its retries are
spent; the turn continues on the fallback, and the log says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.conftest import anthropic_settings, running_services
from tests.providers.fake_servers import Error, FakeAnthropic, FakeOpenAI, Text, ToolCalls
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.cli.summaries import summarize
from turnstream.client import message_command, send_and_wait
from turnstream.core.events import (
    ProviderFallback,
    ProviderRequestStarted,
    ProviderRetry,
    TurnEnded,
)

OVERLOADED = Error(529, "overloaded_error", "Overloaded")


async def test_an_overloaded_primary_hands_the_turn_to_the_fallback_model(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "notes.txt").write_text("the answer is 42\n")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-primary")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fallback")
    # the primary gets exactly its two attempts: a third request (the turn's second model
    # call going back to it) would be answered 500 and fail the fake on exit
    primary = FakeAnthropic([OVERLOADED, OVERLOADED])
    fallback = FakeOpenAI(
        [
            ToolCalls([("call_1", "read_file", {"path": "notes.txt"})], text="Reading."),
            Text("The notes say 42.", chunks=2),
        ]
    )
    async with primary, fallback:
        settings = anthropic_settings(
            nats_server,
            tmp_path,
            primary.base_url,
            provider_max_retries=1,
            provider_retry_base_s=0.01,
            fallback_model="gpt-fake-mini",
            fallback_provider="openai",
            fallback_base_url=fallback.base_url + "/v1",
        )
        async with running_services(settings, bus):
            outcome = await send_and_wait(
                bus, message_command("fallback-1", "what do my notes say?"), timeout=20
            )
    assert outcome.status == "completed", outcome
    assert outcome.reply == "Reading.\n\nThe notes say 42."
    events = [s.event for s in await bus.store.read_session("fallback-1")]
    (switch,) = [e for e in events if isinstance(e, ProviderFallback)]
    assert switch.data.from_ == "anthropic/claude-fake-1"
    assert switch.data.to == "openai/gpt-fake-mini"
    assert switch.data.error_class == "overloaded" and switch.data.attempts == 2
    assert "529" in switch.data.reason
    assert [e.data.error_class for e in events if isinstance(e, ProviderRetry)] == ["overloaded"]
    kinds = [e.type for e in events]
    assert kinds.index("ProviderRetry") < kinds.index("ProviderFallback")
    assert kinds.index("ProviderFallback") < kinds.index("ProviderRequestCompleted")
    # the second model call of the turn went straight to the fallback, and says so
    started = [
        (e.data.provider, e.data.model) for e in events if isinstance(e, ProviderRequestStarted)
    ]
    assert started == [("anthropic", "claude-fake-1"), ("openai", "gpt-fake-mini")]
    assert [r.body["model"] for r in fallback.requests] == ["gpt-fake-mini"] * 2
    assert len(primary.requests) == 2
    assert "sk-fallback" in fallback.requests[0].headers["authorization"]
    assert len([e for e in events if isinstance(e, TurnEnded)]) == 1
    # what `turnstream tail` / `send` show for it
    assert summarize(switch).startswith("⚠ anthropic/claude-fake-1 → openai/gpt-fake-mini")


async def test_a_bad_request_does_not_fall_back(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-primary")
    async with FakeAnthropic([Error(400, "invalid_request_error", "bad tools")]) as primary:
        async with FakeAnthropic([]) as fallback:
            settings = anthropic_settings(
                nats_server,
                tmp_path,
                primary.base_url,
                fallback_model="claude-fake-small",
                fallback_base_url=fallback.base_url,
            )
            async with running_services(settings, bus):
                outcome = await send_and_wait(bus, message_command("fallback-2", "hi"), timeout=20)
    assert outcome.status == "failed" and outcome.failure_class == "provider_error"
    events = [s.event for s in await bus.store.read_session("fallback-2")]
    assert not [e for e in events if isinstance(e, ProviderFallback)]
    assert fallback.requests == []


async def test_an_agent_profile_brings_its_own_fallback_model(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-primary")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fallback")
    agents = tmp_path / "agents"
    agents.mkdir()
    primary = FakeAnthropic([OVERLOADED])
    fallback = FakeOpenAI([Text("from the agent's fallback")])
    async with primary, fallback:
        (agents / "steady.md").write_text(
            "---\nname: steady\ndescription: keeps answering\n"
            "fallbackModel: gpt-fake-steady\nfallbackProvider: openai\n---\nBe steady.\n"
        )
        monkeypatch.setenv("OPENAI_BASE_URL", fallback.base_url + "/v1")  # the SDK's default
        settings = anthropic_settings(
            nats_server,
            tmp_path,
            primary.base_url,
            provider_max_retries=0,
            agents=agents,
        )
        async with running_services(settings, bus):
            command = message_command("fallback-3", "hi", agent="steady")
            outcome = await send_and_wait(bus, command, timeout=20)
    assert outcome.status == "completed" and outcome.reply == "from the agent's fallback", outcome
    events = [s.event for s in await bus.store.read_session("fallback-3")]
    (switch,) = [e for e in events if isinstance(e, ProviderFallback)]
    assert (switch.data.from_, switch.data.to) == (
        "anthropic/claude-fake-1",
        "openai/gpt-fake-steady",
    )
    assert fallback.requests[0].body["model"] == "gpt-fake-steady"
