"""Deterministic clocks, ids and inputs for pure-core tests."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

from turnstream.core.events import Event, InputAccepted, InputAcceptedData, Sender, Usage
from turnstream.core.turn import (
    Context,
    ProviderFailure,
    ProviderSuccess,
    SessionState,
    TurnConfig,
    decide,
    fold,
    on_provider_result,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Ids:
    def __init__(self, prefix: str = "e") -> None:
        self.counter = itertools.count(1)
        self.prefix = prefix

    def __call__(self) -> str:
        return f"{self.prefix}{next(self.counter):04d}"


def ctx(ids: Ids | None = None, at: datetime = T0) -> Context:
    return Context(now=at, new_id=ids or Ids(), source="test/1")


def accepted(n: int, text: str = "hi", session: str = "s1", kind: str = "message") -> InputAccepted:
    return InputAccepted(
        id=f"in{n}",
        time=T0,
        session_id=session,
        chat_id="c1",
        turn_id=f"turn{n}",
        trace_id=f"trace{n}",
        correlation_id=f"key{n}",
        source="gateway/1",
        data=InputAcceptedData(
            kind=kind,  # type: ignore[arg-type]
            text=text,
            sender=Sender(kind="human", id="u1"),
            idempotency_key=f"key{n}",
            inbound_seq=n,
        ),
    )


def success(text: str = "hello back", stop: str = "end_turn") -> ProviderSuccess:
    return ProviderSuccess(
        text=text,
        stop_reason=stop,  # type: ignore[arg-type]
        usage=Usage(input_tokens=3, output_tokens=2),
        first_byte_at=T0 + timedelta(milliseconds=5),
        finished_at=T0 + timedelta(milliseconds=9),
    )


def failure() -> ProviderFailure:
    return ProviderFailure(
        error_class="overloaded", message="busy", retryable=True, failed_at=T0, status_code=529
    )


def run_turn(
    state: SessionState,
    replies: list[ProviderSuccess | ProviderFailure],
    config: TurnConfig | None = None,
    ids: Ids | None = None,
) -> tuple[SessionState, list[Event]]:
    """Drive decide/on_provider_result as the shell would, answering with `replies`."""
    config = config or TurnConfig()
    c = ctx(ids or Ids())
    log: list[Event] = []
    events = decide(state, config, c)
    state = fold(state, events)
    log += events
    for reply in replies:
        if state.active is None or not state.active.awaiting_provider:
            break
        events = on_provider_result(state, reply, config, c)
        state = fold(state, events)
        log += events
    return state, log
