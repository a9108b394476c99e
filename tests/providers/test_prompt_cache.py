"""The prompt cache, on by default: breakpoints where a request's unchanging prefix ends (as
the SDK sent them), context that changes every turn after it, and the cached tokens the
APIs report recorded apart. The fakes bill each request by the APIs' documented rules
(`providers/cache_billing.py`), so a prefix that changes from call to call shows up as
full-price input."""

from __future__ import annotations

from typing import Any

import pytest

from tests.providers.fake_servers import FakeAnthropic, FakeOpenAI, Text
from tests.providers.test_adapters import FAST, TOOLS
from turnstream.core.events import Usage
from turnstream.core.turn import Message, ProviderRequest, ProviderSuccess
from turnstream.providers.anthropic_api import AnthropicProvider
from turnstream.providers.cache_billing import AnthropicCache, OpenAICache
from turnstream.providers.openai_api import OpenAIProvider
from turnstream.providers.wire import PromptCache, anthropic_request

SYSTEM = "You are the support agent of a large shop. " * 600  # ~6,600 tokens
EPHEMERAL = {"type": "ephemeral"}


def request(turn: int, *, volatile: str | None = None, system: str = SYSTEM) -> ProviderRequest:
    """The request of a session's `turn`-th turn: the history grows by two messages a turn."""
    history: list[Message] = []
    for n in range(1, turn):
        history += [Message("user", f"question {n}"), Message("assistant", f"answer {n}")]
    history.append(Message("user", f"question {turn}"))
    return ProviderRequest(
        "s1", f"t{turn}", 1, turn - 1, system, tuple(history), TOOLS, volatile=volatile
    )


async def anthropic_usages(
    requests: list[ProviderRequest], cache: PromptCache = "5m"
) -> tuple[list[Usage], list[Any]]:
    async with FakeAnthropic([Text("ok")] * len(requests), cache=True) as server:
        adapter = AnthropicProvider(
            "claude-fake-1", base_url=server.base_url, api_key="k", retry=FAST, cache=cache
        )
        usages = []
        try:
            for r in requests:
                outcome = await adapter.complete(r, _ignore)
                assert isinstance(outcome, ProviderSuccess)
                usages.append(outcome.usage)
        finally:
            await adapter.close()
    return usages, [r.body for r in server.requests]


async def _ignore(_: str) -> None:
    pass


def test_three_breakpoints_mark_the_tools_the_system_prompt_and_the_history() -> None:
    params = anthropic_request(request(2, volatile="<context>now</context>"), "m", 100)
    assert params["tools"][-1]["cache_control"] == EPHEMERAL
    assert params["system"] == [{"type": "text", "text": SYSTEM, "cache_control": EPHEMERAL}]
    last = params["messages"][-1]["content"]
    # the history's last block is the last breakpoint; the time comes after it, unmarked
    assert last[0] == {"type": "text", "text": "question 2", "cache_control": EPHEMERAL}
    assert last[1] == {"type": "text", "text": "<context>now</context>"}
    marks = [b for m in params["messages"] for b in m["content"] if "cache_control" in b]
    assert len(marks) == 1  # within the API's four with the tools' and the system's
    hour = anthropic_request(request(1), "m", 100, "1h")
    assert hour["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    off = anthropic_request(request(1, volatile="now"), "m", 100, "off")
    assert "cache_control" not in str(off)
    assert off["messages"][-1]["content"][-1]["text"] == "now"


async def test_a_session_reads_its_prefix_from_the_cache_though_the_time_changes() -> None:
    requests = [request(n, volatile=f"<context>12:0{n}</context>") for n in range(1, 6)]
    usages, bodies = await anthropic_usages(requests)
    assert "cache_control" in str(bodies[0]["system"])  # what the SDK sent
    first, *later = usages
    assert first.cache_read_tokens == 0 and first.cache_write_tokens > 6000
    for before, usage in zip(usages, later, strict=False):
        # each call reads all its predecessor wrote and read; only the new turn is written
        assert usage.cache_read_tokens == before.cache_read_tokens + before.cache_write_tokens
        assert 0 < usage.cache_write_tokens < 50 and usage.input_tokens < 20


async def test_the_time_in_the_system_prompt_would_spoil_the_cache() -> None:
    """What the volatile context avoids: the same time put into the system prompt."""
    requests = [request(n, system=f"{SYSTEM}\nnow: 12:0{n}") for n in range(1, 4)]
    usages, _ = await anthropic_usages(requests)
    assert all(u.cache_read_tokens < 100 for u in usages)  # the tools only, below the minimum


async def test_caching_off_sends_no_breakpoint_and_reads_nothing() -> None:
    usages, bodies = await anthropic_usages([request(1), request(2)], cache="off")
    assert "cache_control" not in str(bodies)
    assert all(u.cache_read_tokens == u.cache_write_tokens == 0 for u in usages)
    assert usages[1].input_tokens > 6000


async def test_openai_cached_tokens_are_read_apart_and_the_session_is_the_cache_key() -> None:
    requests = [request(n, volatile=f"now 12:0{n}") for n in range(1, 4)]
    async with FakeOpenAI([Text("ok")] * 3, cache=True) as server:
        adapter = OpenAIProvider(
            "gpt-fake-1", base_url=server.base_url + "/v1", api_key="k", retry=FAST, cache_key=True
        )
        try:
            usages = []
            for r in requests:
                outcome = await adapter.complete(r, _ignore)
                assert isinstance(outcome, ProviderSuccess)
                usages.append(outcome.usage)
        finally:
            await adapter.close()
    bodies = [r.body for r in server.requests]
    assert {b["prompt_cache_key"] for b in bodies} == {"s1"}
    assert bodies[1]["messages"][-1] == {"role": "user", "content": "question 2\n\nnow 12:02"}
    assert usages[0].cache_read_tokens == 0 and usages[0].input_tokens > 6000
    # the second call resends the first's prefix (the time came after it): read from cache,
    # and no longer counted as full-price input
    assert usages[1].cache_read_tokens > 6000 and usages[1].input_tokens < 200
    assert usages[2].cache_read_tokens >= usages[1].cache_read_tokens


def test_the_oracle_caches_nothing_below_the_minimum_and_finds_a_prefix_20_blocks_back() -> None:
    small = {
        "system": [{"type": "text", "text": "x" * 400, "cache_control": EPHEMERAL}],
        "messages": [{"role": "user", "content": "hi"}],
    }
    cache = AnthropicCache()
    assert cache.bill(small).cache_write_tokens == 0 and cache.bill(small).cache_read_tokens == 0
    big = {
        "system": [{"type": "text", "text": "x" * 8000, "cache_control": EPHEMERAL}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }
    written = cache.bill(big).cache_write_tokens
    assert written >= 2000

    def after(blocks: int) -> dict[str, Any]:
        """`big`'s system prompt, unmarked, then `blocks` blocks, the last one marked."""
        content: list[dict[str, Any]] = [{"type": "text", "text": f"m{n}"} for n in range(blocks)]
        content[-1] = content[-1] | {"cache_control": EPHEMERAL}
        return {
            "system": [{"type": "text", "text": "x" * 8000}],
            "messages": [{"role": "user", "content": content}],
        }

    assert cache.bill(after(21)).cache_read_tokens == 0  # the system's entry: 21 blocks back
    assert cache.bill(after(20)).cache_read_tokens == written  # 20 back: found
    openai = OpenAICache()
    body = {
        "messages": [{"role": "system", "content": "y" * 6000}, {"role": "user", "content": "a"}]
    }
    assert openai.bill(body)[1] == 0
    prompt, cached = openai.bill(
        {"messages": [*body["messages"], {"role": "user", "content": "b"}]}
    )
    assert cached % 128 == 0 and 1024 <= cached <= prompt


@pytest.mark.parametrize("value", ["5m", "1h", "off"])
def test_the_setting_reaches_the_provider(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from turnstream.providers import build_provider
    from turnstream.settings import Settings

    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    built = build_provider(Settings(provider="anthropic", prompt_cache=value))  # type: ignore[arg-type]
    assert isinstance(built, AnthropicProvider) and built.cache == value


async def test_a_compaction_leaves_the_tools_and_the_system_prompt_cached() -> None:
    """The summary is stable context after the prompt's own text: its own breakpoint keeps
    the prompt when a compaction rewrites the summary (and drops the history)."""

    def compacted(summary: str) -> ProviderRequest:
        system = f'{SYSTEM}\n\n<context provider="summary">\n{summary}\n</context>'
        plain = request(1, system=system)
        return ProviderRequest(
            "s1", "t", 1, 0, system, plain.messages, TOOLS, system_split=len(SYSTEM)
        )

    params = anthropic_request(compacted("- user: a"), "m", 100)
    assert [("cache_control" in b) for b in params["system"]] == [True, True]
    assert params["system"][0]["text"] == SYSTEM
    usages, _ = await anthropic_usages([compacted("- user: a"), compacted("- user: a, b")])
    prompt = usages[0].cache_write_tokens  # tools and prompt, then the summary, written
    assert usages[1].cache_read_tokens > 6000  # tools and prompt read back
    assert usages[1].cache_read_tokens < prompt  # the new summary is not


async def test_the_scripted_provider_bills_usage_like_the_messages_api() -> None:
    """No key, and still the usage a real call would report: the first call writes the
    prefix, the next reads it; below the minimum or with the cache off, input is plain."""
    from turnstream.providers.scripted import ScriptedProvider, load_script

    async def usages(cache: PromptCache, system: str = SYSTEM) -> list[Usage]:
        provider = ScriptedProvider(load_script(None), cache=cache)
        out = []
        for turn in (1, 2, 3):
            outcome = await provider.complete(request(turn, system=system), _ignore)
            assert isinstance(outcome, ProviderSuccess)
            out.append(outcome.usage)
        return out

    cached = await usages("5m")
    assert cached[0].cache_write_tokens > 6000 and cached[0].cache_read_tokens == 0
    assert cached[1].cache_read_tokens >= cached[0].cache_write_tokens
    assert (
        cached[1].input_tokens < 200 and cached[2].cache_read_tokens > cached[1].cache_read_tokens
    )
    assert all(u.output_tokens > 0 for u in cached)
    plain = await usages("off")
    assert all(u.cache_write_tokens == u.cache_read_tokens == 0 for u in plain)
    assert plain[1].input_tokens == sum(
        (cached[1].input_tokens, cached[1].cache_read_tokens, cached[1].cache_write_tokens)
    )
    short = await usages("5m", system="Be brief.")
    assert all(u.cache_write_tokens == u.cache_read_tokens == 0 for u in short)


def test_the_scripted_billing_remembers_a_session_and_bills_it_the_same() -> None:
    """A runner's history grows by the same `Message` objects: billed from the blocks it
    remembers, each call is billed as if the whole request were read again."""
    from dataclasses import replace

    from turnstream.providers import scripted_usage
    from turnstream.providers.scripted_usage import ScriptedBilling

    remembered, fresh = ScriptedBilling("5m"), ScriptedBilling("5m")
    history: tuple[Message, ...] = ()
    for turn in range(1, 8):
        history += (Message("user", f"question {turn}"),)
        grown = ProviderRequest("s1", f"t{turn}", 1, turn, SYSTEM, history, TOOLS)
        copied = replace(grown, messages=tuple(replace(m) for m in history))
        before = remembered.usage(grown, "ok")
        assert before == fresh.usage(copied, "ok")
        fresh.sessions.clear()  # every call read whole
        history += (Message("assistant", f"answer {turn}"),)
    # an earlier message changed (a compaction's rewrite): billed from there on
    edited = (Message("user", "question one, again"), *history[1:])
    usage = remembered.usage(ProviderRequest("s1", "t9", 1, 9, SYSTEM, edited, TOOLS), "ok")
    # the tools and the system prompt read, the whole history written again
    assert 6000 < usage.cache_read_tokens < before.cache_read_tokens
    assert usage.cache_write_tokens > before.cache_write_tokens
    for n in range(scripted_usage.SESSIONS + 100):
        remembered.usage(ProviderRequest(f"s{n}", "t", 1, 0, "hi", history[:1], TOOLS), "ok")
    assert len(remembered.sessions) == scripted_usage.SESSIONS
