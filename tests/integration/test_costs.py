"""A session's tokens and what they cost, from a real adapter to where people look: the
turn-runner records each call's usage with its model (cache writes and reads apart, as the
SDK reported them from the wire fake), the audit sums them per session, and `replay` and
`sessions` price them with the operator's table."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.http.conftest import http_app
from tests.integration.conftest import anthropic_settings, events_of, only, running_services
from tests.providers.fake_servers import FakeAnthropic, Text
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.client import message_command, send_and_wait
from turnstream.core.events import ProviderRequestCompleted
from turnstream.settings import ContextProviderSetting, ContextSettings

pytestmark = pytest.mark.integration
SYSTEM = "You answer questions about the catalogue. " * 500  # ~5,000 tokens


def cli(*args: str, server: EmbeddedServer, prices: Path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTREAM_")}
    env |= {"TURNSTREAM_PRICES": str(prices), "COLUMNS": "200", "TURNSTREAM_CONFIG": "/nonexistent"}
    done = subprocess.run(
        [sys.executable, "-m", "turnstream.cli", *args, "--nats-url", server.url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_a_sessions_cached_tokens_and_cost_are_recorded_summed_and_shown(
    nats_server: EmbeddedServer, bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "workspace").mkdir()
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    prices = tmp_path / "prices.yaml"
    prices.write_text(
        "anthropic:\n  claude-fake: {input: 3, output: 15, cache_write: 3.75, cache_read: 0.3}\n"
    )
    context = ContextSettings(providers={"datetime": ContextProviderSetting()})
    async with FakeAnthropic([Text("first"), Text("second")], cache=True) as fake:
        settings = anthropic_settings(
            nats_server,
            tmp_path,
            fake.base_url,
            system_prompt=SYSTEM,
            context=context,
            prices=prices,
        )
        async with running_services(settings, bus, with_audit=True), http_app(settings) as url:
            for text in ("one?", "two?"):
                outcome = await send_and_wait(bus, message_command("costly", text), timeout=20)
                assert outcome.status == "completed", outcome
            await asyncio.sleep(0.5)  # the audit's summary
            async with httpx.AsyncClient(base_url=url) as client:
                page = (await client.get("/v1/sessions/costly")).json()
    first, second = [e.data for e in only(await events_of(bus, "costly"), ProviderRequestCompleted)]
    assert (first.provider, first.model) == ("anthropic", "claude-fake-1")
    # the time changed between the turns and came after the cached prefix: it was read back
    assert first.usage.cache_write_tokens > 4000 and first.usage.cache_read_tokens == 0
    assert second.usage.cache_read_tokens == first.usage.cache_write_tokens
    replay = cli("replay", "costly", server=nats_server, prices=prices)
    assert "session total: 2 model calls" in replay
    assert "cached" in replay and "$0.0" in replay
    listing = cli("sessions", server=nats_server, prices=prices)
    assert "costly" in listing and "$0.0" in listing
    # the HTTP face: the session's spend and each turn's, priced with the same table
    total, turns = page["spend"], [t["spend"] for t in page["turns"]]
    assert total["cacheReadTokens"] == second.usage.cache_read_tokens > 0
    assert total["usd"] == pytest.approx(sum(t["usd"] for t in turns)) and total["usd"] > 0
    assert turns[1]["usd"] < turns[0]["usd"] / 5  # the second turn read its prefix cheaply
    assert page["summary"]["models"]["anthropic/claude-fake-1"][3] == total["cacheReadTokens"]
