"""The fallback model, decided: which failures switch a turn to it, and how that is recorded.

    primary ─► retries spent on overloaded / server_error / timeout / connection
            ─► ProviderFallback{from, to, reason} ─► the same call on the fallback
            ─► every later call of the turn on the fallback (`ActiveTurn.on_fallback`)

Any other failure (bad request, auth, prompt too long, rate limit) ends the call as it
would without a fallback: another model would not fix the request, and a rate limit is
the caller's own budget. The shell (`turnstream.providers.fallback`) asks `falls_back`
and performs the calls; this module only decides and records.
"""

from __future__ import annotations

from turnstream.core.events import (
    Event,
    ProviderFallback,
    ProviderFallbackData,
    ProviderRetry,
    ProviderRetryData,
)
from turnstream.core.turn.builder import Builder
from turnstream.core.turn.provider import ProviderFailure, ProviderOutcome, Retry

FALLBACK_CLASSES: frozenset[str] = frozenset(
    {"overloaded", "server_error", "timeout", "connection"}
)
"""Failure classes that move a call to the fallback model once the primary's retries are spent."""


def falls_back(failure: ProviderFailure) -> bool:
    """Whether the primary's final failure sends the call to the fallback model."""
    return failure.retryable and failure.error_class in FALLBACK_CLASSES


def label(provider: str, model: str) -> str:
    """How a model is named in `ProviderFallback`: `provider/model`."""
    return f"{provider}/{model}"


def attempt_events(b: Builder, outcome: ProviderOutcome, iteration: int) -> list[Event]:
    """The attempts behind an outcome, in the order they happened: the primary's retries,
    the switch to the fallback (if any), then the retries of the model that answered."""
    events: list[Event] = []
    switch = outcome.fallback
    if switch is not None:
        events += [_retry(b, retry) for retry in switch.failure.retries]
        failure = switch.failure
        data = ProviderFallbackData(
            from_=switch.from_model,
            to=switch.to_model,
            reason=f"{failure.error_class}: {failure.message}"[:500],
            error_class=failure.error_class,
            attempts=len(failure.retries) + 1,
            iteration=iteration,
        )
        events.append(b.make(ProviderFallback, data, failure.failed_at))
    events += [_retry(b, retry) for retry in outcome.retries]
    return events


def _retry(b: Builder, retry: Retry) -> Event:
    data = ProviderRetryData(
        attempt=retry.attempt,
        delay_ms=retry.delay_ms,
        error_class=retry.error_class,
        message=retry.message,
    )
    return b.make(ProviderRetry, data, retry.at)
