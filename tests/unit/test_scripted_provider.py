from __future__ import annotations

from pathlib import Path

import pytest

from turnstream.core.turn import Message, ProviderFailure, ProviderRequest, ProviderSuccess
from turnstream.providers.scripted import ScriptedProvider, load_script


def request(call_index: int, text: str = "ping") -> ProviderRequest:
    return ProviderRequest("s", "t", 1, call_index, None, (Message("user", text),))


async def collect(provider: ScriptedProvider, req: ProviderRequest):
    deltas: list[str] = []

    async def sink(delta: str) -> None:
        deltas.append(delta)

    return await provider.complete(req, sink), deltas


async def test_demo_script_echoes_the_input_as_streamed_words() -> None:
    outcome, deltas = await collect(ScriptedProvider(load_script(None)), request(0, "hello you"))
    assert isinstance(outcome, ProviderSuccess)
    assert 'You said: "hello you"' in outcome.text
    assert "".join(deltas) == outcome.text and len(deltas) > 3


async def test_reply_is_chosen_by_call_index_and_wraps(tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text(
        "replies:\n"
        "  - text: 'first {input:3}'\n"
        "  - {text: 'second #{call}', stop_reason: max_tokens, chunks: whole}\n"
        "  - error: {error_class: overloaded, message: busy, retryable: true, status_code: 529}\n"
    )
    provider = ScriptedProvider(load_script(script))
    first, _ = await collect(provider, request(0, "abcdef"))
    second, deltas = await collect(provider, request(1))
    third, _ = await collect(provider, request(2))
    fourth, _ = await collect(provider, request(3, "xyz"))
    assert isinstance(first, ProviderSuccess) and first.text == "first abc"
    assert isinstance(second, ProviderSuccess) and second.stop_reason == "max_tokens"
    assert second.text == "second #1" and deltas == ["second #1"]
    assert isinstance(third, ProviderFailure) and third.error_class == "overloaded"
    assert isinstance(fourth, ProviderSuccess) and fourth.text == "first xyz"


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("replies: []", "at least 1"),
        ("replies:\n  - text: '{env.HOME}'", "unknown placeholder"),
        ("replies:\n  - {text: hi, colour: red}", "colour"),
        ("replies: [", "invalid script"),
    ],
)
def test_bad_scripts_fail_with_the_file_and_the_fix(tmp_path: Path, content, needle) -> None:
    script = tmp_path / "bad.yaml"
    script.write_text(content)
    with pytest.raises(ValueError, match="invalid script") as info:
        load_script(script)
    assert needle in str(info.value)
    assert str(script) in str(info.value)


def test_missing_script_names_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="TURNSTREAM_SCRIPT"):
        load_script(tmp_path / "nope.yaml")
