"""A whole turn with a real provider adapter (the official SDK against a local server that
speaks the provider's wire format), and the API key never reaching the log."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from tests.integration.conftest import running_services, settings_for
from tests.providers.fake_servers import Error, FakeAnthropic, FakeOpenAI, Text, ToolCalls
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.client import message_command, send_and_wait
from turnstream.core.events import ProviderRetry, ToolInvocationSucceeded, TurnEnded

CANARY = "sk-canary-7f3a9c1e-do-not-log"


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
async def test_a_tool_turn_through_a_real_adapter_never_logs_the_key(
    nats_server: EmbeddedServer,
    bus: Bus,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
) -> None:
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "notes.txt").write_text("the answer is 42\n")
    monkeypatch.setenv(f"{kind.upper()}_API_KEY", CANARY)
    script = [
        Error(429, "rate_limit_error", "slow down", retry_after=0.01),
        ToolCalls([("call_1", "read_file", {"path": "notes.txt"})], text="Reading."),
        Text("The notes say the answer is 42.", chunks=4),
    ]
    fake = FakeAnthropic(script) if kind == "anthropic" else FakeOpenAI(script)
    session = f"real-{kind}"
    async with fake:
        base_url = fake.base_url if kind == "anthropic" else fake.base_url + "/v1"
        settings = settings_for(
            nats_server,
            tmp_path,
            provider=kind,
            model=f"{'claude' if kind == 'anthropic' else 'gpt'}-fake-1",
            base_url=base_url,
            provider_retry_base_s=0.01,
        )
        deltas: list[str] = []
        async with running_services(settings, bus):
            outcome = await send_and_wait(
                bus,
                message_command(session, "what do my notes say?"),
                on_delta=deltas.append,
                timeout=20,
            )
            await asyncio.sleep(0.2)
    assert outcome.status == "completed", outcome
    assert outcome.reply == "Reading.\n\nThe notes say the answer is 42."
    assert "".join(deltas).endswith("The notes say the answer is 42.")
    events = [s.event for s in await bus.store.read_session(session)]
    assert len([e for e in events if isinstance(e, TurnEnded)]) == 1
    assert [e.data.error_class for e in events if isinstance(e, ProviderRetry)] == ["rate_limit"]
    (result,) = [e for e in events if isinstance(e, ToolInvocationSucceeded)]
    assert "42" in result.data.output
    # the call was handed to TOOL_CALL as soon as its block was complete, mid-stream
    kinds = [e.type for e in events]
    assert kinds.index("ToolInvocationProposed") < kinds.index("ProviderRequestCompleted")
    assert kinds.count("ToolInvocationProposed") == 1
    # the key was sent to the provider, and nowhere else
    headers = fake.requests[0].headers
    assert CANARY in headers.get("authorization", "") + headers.get("x-api-key", "")
    log = b"".join(orjson.dumps(e.model_dump(mode="json")) for e in events)
    assert CANARY.encode() not in log
    # the tool result went back to the model paired with its call
    second = orjson.dumps(fake.requests[2].body)
    assert b"call_1" in second and b"the answer is 42" in second


async def test_sessions_matching_a_pattern_get_their_own_provider_and_model(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from turnstream.core.events import ProviderRequestStarted
    from turnstream.settings import SessionOverride

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    script = tmp_path / "script.yaml"
    script.write_text('replies:\n  - {text: "scripted {input}"}\n')
    async with FakeAnthropic([Text("from claude")]) as fake:
        overrides = {
            "claude-*": SessionOverride(
                provider="anthropic", base_url=fake.base_url, model="claude-fake-1", max_tokens=99
            ),
            "terse-*": SessionOverride(model="terse-demo"),
        }
        settings = settings_for(nats_server, tmp_path, script=script, sessions=overrides)
        async with running_services(settings, bus):
            routed = await send_and_wait(bus, message_command("claude-1", "hi"), timeout=15)
            terse = await send_and_wait(bus, message_command("terse-1", "hi"), timeout=15)
            plain = await send_and_wait(bus, message_command("plain-1", "hi"), timeout=15)
    assert routed.reply == "from claude" and fake.requests[0].body["max_tokens"] == 99
    assert terse.reply == plain.reply == "scripted hi"

    async def model_of(session: str) -> tuple[str, str]:
        events = [s.event for s in await bus.store.read_session(session)]
        started = next(e for e in events if isinstance(e, ProviderRequestStarted))
        return started.data.provider, started.data.model

    assert await model_of("claude-1") == ("anthropic", "claude-fake-1")
    assert await model_of("terse-1") == ("scripted", "terse-demo")
    assert await model_of("plain-1") == ("scripted", "demo")
