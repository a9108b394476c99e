"""One bounded retry loop for every provider; each retried attempt becomes a `ProviderRetry`.

The SDKs' own retries are off (`max_retries=0`): retries nobody can see are not retries
we can reason about. Delays grow exponentially from `base_delay_s`, capped, and honour a
server's `retry-after` when it sends one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from turnstream.core.turn import ProviderFailure, ProviderOutcome, Retry


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 3
    base_delay_s: float = 0.5
    max_delay_s: float = 20.0

    def delay(self, attempt: int, retry_after_s: float | None) -> float:
        backoff = min(self.max_delay_s, self.base_delay_s * 2.0 ** (attempt - 1))
        if retry_after_s is not None:
            return min(self.max_delay_s, max(backoff, retry_after_s))
        return backoff


async def with_retries(
    attempt_once: Callable[[], Awaitable[ProviderOutcome]],
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> ProviderOutcome:
    """Call `attempt_once` until it succeeds, fails for good, or the retries are spent."""
    retries: list[Retry] = []
    attempt = 1
    while True:
        outcome = await attempt_once()
        retryable = isinstance(outcome, ProviderFailure) and outcome.retryable
        if not retryable or attempt > policy.max_retries:
            return replace(outcome, retries=tuple(retries))
        assert isinstance(outcome, ProviderFailure)
        delay = policy.delay(attempt, outcome.retry_after_s)
        retries.append(
            Retry(
                attempt=attempt,
                delay_ms=int(delay * 1000),
                error_class=outcome.error_class,
                message=outcome.message,
                at=datetime.now(UTC),
            )
        )
        await sleep(delay)
        attempt += 1
