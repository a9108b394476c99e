"""The fallback model, decided: which failures switch, what the log says, and that the
rest of the turn stays on the fallback. No I/O."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from tests.unit.factories import T0, Ids, accepted, failure, run_turn, success
from turnstream.core.events import (
    ProviderFallback,
    ProviderRequestStarted,
    ProviderRetry,
    TurnEnded,
    decode,
    encode,
)
from turnstream.core.session import SessionState, fold
from turnstream.core.turn import ProviderFailure, ProviderSuccess, TurnConfig, compose_request
from turnstream.core.turn.fallback import falls_back
from turnstream.core.turn.provider import Fallback, Retry
from turnstream.settings import Settings

CONFIG = TurnConfig(provider="anthropic", model="big", fallback=("openai", "small"))


def _failure(error_class: str, retryable: bool = True) -> ProviderFailure:
    return ProviderFailure(error_class, "nope", retryable, T0)


@pytest.mark.parametrize(
    ("error_class", "retryable", "expected"),
    [
        ("overloaded", True, True),
        ("server_error", True, True),
        ("timeout", True, True),
        ("connection", True, True),
        ("rate_limit", True, False),  # the caller's budget: another model would not fix it
        ("prompt_too_long", False, False),
        ("bad_request", False, False),
        ("auth", False, False),
        ("server_error", False, False),
    ],
)
def test_only_retryable_outages_fall_back(
    error_class: str, retryable: bool, expected: bool
) -> None:
    assert falls_back(_failure(error_class, retryable)) is expected


def _retry(attempt: int, error_class: str = "overloaded") -> Retry:
    return Retry(attempt, 10, error_class, "busy", T0 + timedelta(milliseconds=attempt))


def _switched(answer: ProviderSuccess, primary_retries: int = 2) -> ProviderSuccess:
    primary = replace(failure(), retries=tuple(_retry(i + 1) for i in range(primary_retries)))
    switch = Fallback("anthropic/big", "openai/small", primary)
    return replace(answer, fallback=switch)


def test_the_log_records_the_primary_retries_then_the_switch_then_the_answer() -> None:
    answer = replace(success("from the fallback"), retries=(_retry(1, "server_error"),))
    _state, log = run_turn(fold(SessionState.of("s1"), [accepted(1)]), [_switched(answer)], CONFIG)
    kinds = [e.type for e in log if e.type.startswith("Provider")]
    assert kinds == [
        "ProviderRequestStarted",
        "ProviderRetry",
        "ProviderRetry",
        "ProviderFallback",
        "ProviderRetry",
        "ProviderRequestCompleted",
    ]
    (switch,) = [e for e in log if isinstance(e, ProviderFallback)]
    assert switch.data.from_ == "anthropic/big" and switch.data.to == "openai/small"
    assert switch.data.error_class == "overloaded" and switch.data.attempts == 3
    assert switch.data.reason == "overloaded: busy"
    assert [e.data.error_class for e in log if isinstance(e, ProviderRetry)][-1] == "server_error"
    (ended,) = [e for e in log if isinstance(e, TurnEnded)]
    assert ended.data.status == "completed" and ended.data.reply == "from the fallback"
    # on the wire the field is `from`
    assert b'"from":"anthropic/big"' in encode(switch)
    assert decode(encode(switch)) == switch


def test_the_rest_of_the_turn_stays_on_the_fallback_and_the_next_turn_tries_the_primary() -> None:
    config = replace(CONFIG, max_output_continuations=1)
    first = _switched(success("part one, ", "max_tokens"))
    state, log = run_turn(
        fold(SessionState.of("s1"), [accepted(1)]),
        [first, success("part two")],
        config,
    )
    started = [e.data for e in log if isinstance(e, ProviderRequestStarted)]
    assert [(d.provider, d.model) for d in started] == [("anthropic", "big"), ("openai", "small")]
    assert next(e for e in log if isinstance(e, TurnEnded)).data.reply == "part one, part two"

    state = fold(state, [accepted(2)])
    state, log = run_turn(state, [success("primary again")], config, Ids("n"))
    started = [e.data for e in log if isinstance(e, ProviderRequestStarted)]
    assert [(d.provider, d.model) for d in started] == [("anthropic", "big")]


def test_the_request_of_a_switched_turn_says_so() -> None:
    state, _ = run_turn(fold(SessionState.of("s1"), [accepted(1)]), [], CONFIG)
    assert state.chat.active is not None and not compose_request(state.chat, CONFIG).on_fallback
    state, _ = run_turn(
        fold(SessionState.of("s1"), [accepted(1)]),
        [_switched(success("x", "max_tokens"))],
        replace(CONFIG, max_output_continuations=1),
    )
    assert state.chat.active is not None and state.chat.active.on_fallback
    assert compose_request(state.chat, CONFIG).on_fallback


def test_fallback_settings_default_to_the_primary_provider_and_its_endpoint() -> None:
    assert Settings(provider="openai").fallback_settings() is None
    same = Settings(provider="openai", base_url="http://local/v1", fallback_model="small")
    fallback = same.fallback_settings()
    assert fallback is not None
    assert (fallback.provider, fallback.model_name, fallback.base_url) == (
        "openai",
        "small",
        "http://local/v1",
    )
    assert fallback.fallback_settings() is None  # no fallback of the fallback
    assert same.turn_config().fallback == ("openai", "small")
    other = Settings(
        provider="anthropic",
        base_url="http://claude",
        fallback_model="m",
        fallback_provider="openai",
    ).fallback_settings()
    assert other is not None and (other.provider, other.base_url) == ("openai", None)
