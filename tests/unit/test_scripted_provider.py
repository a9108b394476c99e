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


async def test_demo_script_makes_a_tool_round_trip_then_echoes() -> None:
    provider = ScriptedProvider(load_script(None))
    first, _ = await collect(provider, request(0, "hello you"))
    assert isinstance(first, ProviderSuccess)
    assert [c.name for c in first.tool_calls] == ["list_dir"]
    assert first.stop_reason == "tool_use"
    messages = (
        Message("user", "hello you"),
        Message("assistant", first.text, tool_calls=first.tool_calls),
        Message("tool", "README.md\nsrc/", tool_call_id=first.tool_calls[0].id),
    )
    second, deltas = await collect(provider, ProviderRequest("s", "t", 2, 1, None, messages))
    assert isinstance(second, ProviderSuccess) and not second.tool_calls
    assert 'You said: "hello you"' in second.text and "README.md" in second.text
    assert "".join(deltas) == second.text and len(deltas) > 3


async def test_tool_calls_get_stable_ids_per_call_index(tmp_path: Path) -> None:
    script = tmp_path / "tools.yaml"
    script.write_text(
        "replies:\n"
        "  - tool_calls: [{name: a, arguments: {x: 1}}, {name: b}]\n"
        "  - text: 'got {last_tool_result:4}'\n"
    )
    provider = ScriptedProvider(load_script(script))
    first, _ = await collect(provider, request(4))
    assert isinstance(first, ProviderSuccess)
    assert [(c.id, c.name, c.arguments) for c in first.tool_calls] == [
        ("call_4_0", "a", {"x": 1}),
        ("call_4_1", "b", {}),
    ]
    again, _ = await collect(provider, request(4))
    assert isinstance(again, ProviderSuccess) and again.tool_calls == first.tool_calls
    messages = (Message("user", "q"), Message("tool", "abcdefgh", tool_call_id="call_4_0"))
    second, _ = await collect(provider, ProviderRequest("s", "t", 2, 5, None, messages))
    assert isinstance(second, ProviderSuccess) and second.text == "got abcd"


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


async def test_a_workflow_stage_gets_its_own_replies_counted_per_stage_turn(
    tmp_path: Path,
) -> None:
    script = tmp_path / "s.yaml"
    script.write_text("replies: [{text: chat}]\nstages:\n  plan: [{text: p0}, {text: p1}]\n")
    provider = ScriptedProvider(load_script(script))
    base = request(0)
    in_plan = [
        ProviderRequest("s", "t", 1, i, "sys", base.messages, stage="plan") for i in (0, 1, 2)
    ]
    texts = [(await collect(provider, r))[0].text for r in in_plan]
    assert texts == ["p0", "p1", "p0"]
    other = ProviderRequest("s", "t", 1, 0, "sys", base.messages, stage="review")
    assert (await collect(provider, other))[0].text == "chat"
    assert (await collect(provider, base))[0].text == "chat"


async def test_a_retryable_scripted_error_is_retried_like_a_real_one(tmp_path: Path) -> None:
    from turnstream.providers.retry import RetryPolicy

    script = tmp_path / "s.yaml"
    script.write_text(
        "replies:\n"
        "  - error: {error_class: overloaded, retryable: true, status_code: 529, times: 2}\n"
        "    text: 'back again'\n"
        "  - error: {error_class: overloaded, retryable: true, status_code: 529}\n"
        "  - error: {error_class: bad_request, status_code: 400}\n"
    )
    provider = ScriptedProvider(load_script(script), retry=RetryPolicy(3, base_delay_s=0.001))
    recovered, deltas = await collect(provider, request(0))
    assert isinstance(recovered, ProviderSuccess) and recovered.text == "back again"
    assert len(recovered.retries) == 2 and "".join(deltas) == "back again"
    spent, _ = await collect(provider, request(1))
    assert isinstance(spent, ProviderFailure) and len(spent.retries) == 3
    final, _ = await collect(provider, request(2))
    assert isinstance(final, ProviderFailure) and final.retries == ()
