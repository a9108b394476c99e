"""The context registry without NATS: built-ins, budgets, failures, configuration errors."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest

from turnstream.context import ContextRegistry, ContextSpec
from turnstream.core.turn.context import ContextRequest, Contributed, Skipped
from turnstream.settings import ContextProviderSetting, ContextSettings, Settings

REQUEST = ContextRequest("s1", "t1", 1, "hi", "- user: long ago")


def settings(tmp_path: Path, **providers: ContextProviderSetting) -> Settings:
    return Settings(workspace=tmp_path, context=ContextSettings(providers=providers))


async def test_builtins_answer_from_the_workspace_the_clock_and_the_summary(
    tmp_path: Path,
) -> None:
    names = {n: ContextProviderSetting() for n in ("agents_md", "datetime", "summary")}
    clock = lambda: datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)  # noqa: E731
    registry = ContextRegistry.load(settings(tmp_path, **names), clock=clock)
    found = await registry.gather(REQUEST)
    assert found[0] == Contributed("agents_md", "")  # no AGENTS.md: nothing recorded
    assert found[1] == Contributed(  # new each turn: after the prompt-cache prefix
        "datetime", "Current date and time: 2026-01-02T03:04:05Z (Friday).", volatile=True
    )
    assert found[2] == Contributed(
        "summary", "Earlier in this conversation (compacted):\n- user: long ago"
    )
    (tmp_path / "AGENTS.md").write_text("Tabs, not spaces.\n")
    assert (await registry.gather(REQUEST))[
        0
    ].content == "The workspace's AGENTS.md:\nTabs, not spaces."  # type: ignore[union-attr]


async def test_the_settings_say_which_provider_is_volatile(tmp_path: Path) -> None:
    names = {
        "datetime": ContextProviderSetting(volatile=False),
        "summary": ContextProviderSetting(volatile=True),
    }
    registry = ContextRegistry.load(settings(tmp_path, **names))
    found = {r.provider: r for r in await registry.gather(REQUEST)}
    assert not found["datetime"].volatile  # type: ignore[union-attr]
    assert found["summary"].volatile  # type: ignore[union-attr]


async def test_budget_timeout_failure_and_bad_answers(tmp_path: Path) -> None:
    async def long(_: ContextRequest) -> str:
        return "y" * 100

    async def hang(_: ContextRequest) -> str:
        await asyncio.sleep(1)
        return ""

    async def bad(_: ContextRequest) -> str:
        return 42  # type: ignore[return-value]

    async def boom(_: ContextRequest) -> str:
        raise KeyError("x")

    extra = [
        (ContextSpec("long", max_tokens=5), long),
        (ContextSpec("hang", timeout_ms=20), hang),
        (ContextSpec("bad"), bad),
        (ContextSpec("boom"), boom),
    ]
    found = await ContextRegistry.load(settings(tmp_path), extra=extra).gather(REQUEST)
    assert found == (
        Skipped("bad", "answered int, not text"),
        Skipped("boom", "KeyError: 'x'"),
        Skipped("hang", "no answer within 20 ms", timed_out=True),
        Contributed("long", "y" * 20, truncated=True),
    )


def test_an_unknown_provider_name_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'teams' is neither built in"):
        ContextRegistry.load(settings(tmp_path, teams=ContextProviderSetting()))
    assert not ContextRegistry.load(settings(tmp_path))
