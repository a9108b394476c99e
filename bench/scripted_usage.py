"""What the scripted provider's billed usage costs a call as a session's history grows,
beside billing the whole request each call (the first version) and the made-up counts
before both, in one run.

    .venv/bin/python bench/scripted_usage.py [--turns 200]

A session of `--turns` turns (two calls a turn, the history growing by the same `Message`
objects, as a runner's does), the three test tools and a ~1,500-token system prompt: the
cost of a call at the first ten turns and at the last ten.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.providers.test_adapters import TOOLS
from turnstream.core.events import Usage
from turnstream.core.turn import Message, ProviderRequest
from turnstream.providers.cache_billing import AnthropicCache
from turnstream.providers.scripted_usage import ScriptedBilling
from turnstream.providers.wire import anthropic_request

SYSTEM = "You are the support agent of a large shop. " * 140  # ~1,500 tokens


def session(turns: int) -> list[ProviderRequest]:
    """Each call's request: a question, a tool call and its result, then the answer."""
    history: tuple[Message, ...] = ()
    out = []
    for n in range(turns):
        history += (Message("user", f"question {n}"),)
        out.append(ProviderRequest("s", f"t{n}", 1, 2 * n, SYSTEM, history, TOOLS))
        history += (Message("assistant", "", ()), Message("tool", f"result {n}", (), "c"))
        out.append(ProviderRequest("s", f"t{n}", 1, 2 * n + 1, SYSTEM, history, TOOLS))
        history += (Message("assistant", f"answer {n}"),)
    return out


def per_call_us(
    bill: Callable[[ProviderRequest], Usage], calls: list[ProviderRequest]
) -> list[float]:
    times = []
    for request in calls:
        start = time.perf_counter()
        bill(request)
        times.append((time.perf_counter() - start) * 1e6)
    return times


def whole_request() -> Callable[[ProviderRequest], Usage]:
    cache = AnthropicCache(max_entries=4096)

    def bill(request: ProviderRequest) -> Usage:
        billed = cache.bill(anthropic_request(request, "demo", 1024, "5m"))
        return Usage(input_tokens=billed.input_tokens)

    return bill


def remembered() -> Callable[[ProviderRequest], Usage]:
    billing = ScriptedBilling("5m")
    return lambda request: billing.usage(request, "answer")


def made_up(request: ProviderRequest) -> Usage:
    return Usage(input_tokens=len(request.messages), output_tokens=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    calls = session(args.turns)
    print(f"µs a call, a session of {args.turns} turns ({len(calls)} calls), median of 5 runs")
    print(f"{'':>28} {'first 10 turns':>15} {'last 10 turns':>15}")
    for label, make in (
        ("made-up counts", lambda: made_up),
        ("whole request billed", whole_request),
        ("blocks remembered (now)", remembered),
    ):
        runs = [per_call_us(make(), calls) for _ in range(5)]
        first = sorted(sum(r[:20]) / 20 for r in runs)[2]
        last = sorted(sum(r[-20:]) / 20 for r in runs)[2]
        print(f"{label:>28} {first:15.1f} {last:15.1f}")


if __name__ == "__main__":
    main()
