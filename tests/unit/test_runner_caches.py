"""What the turn-runner remembers per session is bounded, whatever number of sessions it sees."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from turnstream.core.subjects import Subjects
from turnstream.core.turn import TurnConfig
from turnstream.providers import ScriptedProvider, load_script
from turnstream.settings import Settings
from turnstream.turn_runner import app
from turnstream.turn_runner.app import Runner


def test_the_sessions_patterns_are_remembered_for_a_bounded_number_of_sessions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(app, "KNOWN_PATTERNS", 10)
    settings = Settings(
        provider="scripted", sessions={"vip-*": {"max_tokens": 100}, "*-x": {"model": "m"}}
    )
    bus = SimpleNamespace(js=None, nc=None, subjects=Subjects())
    runner = Runner(bus, ScriptedProvider(load_script(None)), TurnConfig(), settings=settings)  # type: ignore[arg-type]
    base = runner.provider
    for n in range(50):
        vip, plain = runner.for_session(f"vip-{n}-x")[0], runner.for_session(f"s-{n}")[0]
        assert vip is not base and plain is base  # the first pattern that matches wins
    assert len(runner.session_patterns) <= 10
    assert list(runner.session_providers) == ["vip-*"]  # built once, not per session
    assert runner.for_session("vip-0-x")[0] is runner.for_session("vip-49-x")[0]
    assert runner.for_session("a-x")[0] is runner.session_providers["*-x"][0]
