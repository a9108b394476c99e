"""What a session's model input costs, with the prompt cache and without.

    python bench/llm_cost.py [--turns 20]

A session of `--turns` one-tool turns (two model calls each: the question, then the tool's
result) with a ~6,000-token system prompt, three tools, the time as volatile context (new
every turn) and a history that grows, sent through our adapters and the official SDKs to
the local wire fakes (tests/providers/fake_servers.py), which bill each request's input by
the APIs' documented cache rules (services/turnstream/providers/cache_billing.py). A second session
compacts once halfway (the history replaced by a summary in the system prompt, as the
runner's compaction does).

Billed input weighs each kind of input token by its price relative to plain input:
Anthropic cache writes 1.25 (5-minute TTL), cache reads 0.1; OpenAI cached input 0.25
(GPT-4.1's). The figure that matters is the ratio with caching / without, per wire.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parents[1]))
from tests.providers.fake_servers import FakeAnthropic, FakeOpenAI, FakeServer, Text, ToolCalls
from turnstream.core.events import Usage
from turnstream.core.turn import Message, ProviderRequest, ProviderSuccess, ToolInfo
from turnstream.core.turn.context import running_summary
from turnstream.providers.anthropic_api import AnthropicProvider
from turnstream.providers.openai_api import OpenAIProvider
from turnstream.providers.retry import RetryPolicy
from turnstream.providers.sdk import SdkProvider

console = Console(highlight=False)
SYSTEM = (
    "You are the support agent of a hardware shop. Answer from the catalogue and the "
    "customer's orders; look things up with the tools before you answer. "
) * 150  # ~6,000 tokens
TOOLS = tuple(
    ToolInfo(
        name,
        f"{name.replace('_', ' ')}: " + "a parameter described at length. " * 20,
        {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        True,
        True,
        5.0,
    )
    for name in ("search_catalogue", "read_order", "check_stock")
)
WEIGHTS = {
    "anthropic": {"input": 1.0, "write": 1.25, "read": 0.1},
    "openai": {"input": 1.0, "write": 1.0, "read": 0.25},
}


def billed(kind: str, usage: Usage) -> float:
    w = WEIGHTS[kind]
    return (
        usage.input_tokens * w["input"]
        + usage.cache_write_tokens * w["write"]
        + usage.cache_read_tokens * w["read"]
    )


def adapter(kind: str, server: FakeServer, cache: bool) -> SdkProvider:
    fast = RetryPolicy(max_retries=0)
    if kind == "anthropic":
        return AnthropicProvider(
            "claude-fake",
            base_url=server.base_url,
            api_key="k",
            retry=fast,
            cache="5m" if cache else "off",
        )
    return OpenAIProvider(
        "gpt-fake", base_url=server.base_url + "/v1", api_key="k", retry=fast, cache_key=cache
    )


async def session(kind: str, turns: int, *, cache: bool, compact_at: int | None) -> list[Usage]:
    """Every call's usage for one session. Without `cache`, requests go out as they did
    before the prompt cache was on: no breakpoints, and the time inside the system prompt
    (OpenAI caches on its own, but then only a turn's second call matches its first)."""
    replies: list[Text | ToolCalls] = []
    for n in range(turns):
        replies += [
            ToolCalls([(f"call_{n}", "search_catalogue", {"query": f"part {n}"})]),
            Text(f"Part {n} is in stock: " + "details " * 40),
        ]
    fake_type = FakeAnthropic if kind == "anthropic" else FakeOpenAI
    usages: list[Usage] = []
    async with fake_type(replies, cache=True) as server:
        model = adapter(kind, server, cache)
        history: tuple[Message, ...] = ()
        summary, index = "", 0
        try:
            for n in range(turns):
                if compact_at is not None and n == compact_at:
                    summary = running_summary(summary, history)
                    history = history[-2:]
                history += (Message("user", f"Is part {n} in stock? " + "context " * 30),)
                now = f'<context provider="datetime">\n2026-11-27T12:{n:02d}:00Z\n</context>'
                for _ in range(2):
                    system = SYSTEM
                    if summary:
                        system += f'\n\n<context provider="summary">\n{summary}\n</context>'
                    if not cache:
                        system += "\n\n" + now
                    volatile = now if cache else None
                    # as compose_request does: the summary is stable context after the prompt
                    split = len(SYSTEM) if cache and summary else None
                    request = ProviderRequest(
                        "s1",
                        f"t{n}",
                        1,
                        index,
                        system,
                        history,
                        TOOLS,
                        volatile=volatile,
                        system_split=split,
                    )
                    outcome = await model.complete(request, _ignore)
                    assert isinstance(outcome, ProviderSuccess), outcome
                    usages.append(outcome.usage)
                    index += 1
                    if outcome.tool_calls:
                        call = outcome.tool_calls[0]
                        history += (
                            Message("assistant", outcome.text, tool_calls=(call,)),
                            Message(
                                "tool", f"part {n}: 12 in stock, aisle 4", tool_call_id=call.id
                            ),
                        )
                    else:
                        history += (Message("assistant", outcome.text),)
        finally:
            await model.close()
    return usages


async def _ignore(_: str) -> None:
    pass


async def main(turns: int) -> None:
    table = Table(title=f"billed input of a {turns}-turn session (2 calls a turn), in tokens")
    columns = ("wire", "session", "no cache", "before", "with cache", "÷ no cache", "÷ before")
    for column in (*columns, "read from cache"):
        table.add_column(column, justify="left" if column in ("wire", "session") else "right")
    for kind in ("anthropic", "openai"):
        for label, compact_at in (("plain", None), ("compacts once", turns // 2)):
            before = await session(kind, turns, cache=False, compact_at=compact_at)
            cached = await session(kind, turns, cache=True, compact_at=compact_at)
            full = sum(all_input(u) for u in before)
            then = sum(billed(kind, u) for u in before)
            now = sum(billed(kind, u) for u in cached)
            read = sum(u.cache_read_tokens for u in cached) / sum(all_input(u) for u in cached)
            table.add_row(
                kind,
                label,
                f"{full:,.0f}",
                f"{then:,.0f}",
                f"{now:,.0f}",
                f"{now / full:.1%}",
                f"{now / then:.1%}",
                f"{read:.0%}",
            )
    console.print(table, width=120)
    console.print(
        "weights: anthropic write 1.25, read 0.1; openai cached 0.25 (relative to plain input)"
    )


def all_input(usage: Usage) -> int:
    return usage.input_tokens + usage.cache_write_tokens + usage.cache_read_tokens


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20)
    asyncio.run(main(parser.parse_args().turns))
