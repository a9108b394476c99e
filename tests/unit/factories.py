"""Deterministic clocks, ids and inputs for pure-core tests."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

from turnstream.core.events import (
    Event,
    InputAccepted,
    InputAcceptedData,
    InterruptReceived,
    InterruptReceivedData,
    Sender,
    Usage,
)
from turnstream.core.inputs import Tick
from turnstream.core.session import SessionState, fold
from turnstream.core.session.decider import Input, ProviderDone
from turnstream.core.session.decider import decide as session_decide
from turnstream.core.turn import Context, ProviderFailure, ProviderSuccess, TurnConfig

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


def fact(cls: Any, data_cls: Any, turn: str = "turn1", **data: Any) -> Any:
    """An event another service appends (a verdict, a result) for `turn` of session s1."""
    return cls(
        id=f"f-{cls.__name__}-{data.get('invocation_id')}",
        time=T0,
        session_id="s1",
        chat_id="c1",
        turn_id=turn,
        trace_id="trace1",
        correlation_id="key1",
        source="other/1",
        data=data_cls(**data),
    )


def succeed(inv: str, output: str = "ok", turn: str = "turn1") -> Any:
    """The tool-executor's result of invocation `inv`."""
    from turnstream.core.events import ToolInvocationSucceeded, ToolInvocationSucceededData

    return fact(
        ToolInvocationSucceeded,
        ToolInvocationSucceededData,
        turn,
        invocation_id=inv,
        output=output,
        size=len(output),
        duration_ms=1.0,
    )


def interrupt(mode: str, n: int = 9) -> InterruptReceived:
    """An inbound interrupt of session s1 (the gateway's record of it)."""
    return InterruptReceived(
        id=f"int-{mode}-{n}",
        time=T0,
        session_id="s1",
        chat_id="c1",
        trace_id="tr",
        correlation_id=f"k-int-{n}",
        source="gateway/1",
        data=InterruptReceivedData(
            mode=mode,  # type: ignore[arg-type]
            sender=Sender(kind="human", id="ana"),
            idempotency_key=f"k-int-{n}",
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
    """Drive the session decider as the shell would, answering its model calls with
    `replies`."""
    config = config or TurnConfig()
    c = ctx(ids or Ids())
    log: list[Event] = []
    item: Input = Tick()
    for reply in [None, *replies]:
        if reply is not None:
            if state.active is None or not state.active.awaiting_provider:
                break
            item = ProviderDone(state.active.turn_id, reply)
        events = session_decide(state, item, config, c)
        state = fold(state, events)
        assert events.state == state  # the state the shell takes instead of folding again
        log += events
    return state, log
