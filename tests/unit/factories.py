"""Deterministic clocks, ids and inputs for pure-core tests."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from turnstream.core.events import (
    Event,
    InputAccepted,
    InputAcceptedData,
    InterruptReceived,
    InterruptReceivedData,
    Sender,
    ToolInvocationRequested,
    ToolInvocationRequestedData,
    Usage,
)
from turnstream.core.fold import Decision
from turnstream.core.inputs import Tick
from turnstream.core.session import SessionState, fold
from turnstream.core.session.decider import Effect, Input, ProviderDone, Providers, decide_session
from turnstream.core.turn import Context, ProviderFailure, ProviderSuccess, TurnConfig
from turnstream.runtime.interpreter import run_until_quiet

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


Reply = ProviderSuccess | ProviderFailure


class InMemory:
    """A session driven as the runner's actor drives it (the same loop,
    `turnstream.runtime.interpreter.run_until_quiet`): each decision of the session decider
    is committed to an in-memory log, and the model calls it asks for are answered with
    scripted `replies`, in order."""

    def __init__(
        self,
        state: SessionState,
        config: TurnConfig | None = None,
        ids: Ids | None = None,
        replies: Iterable[Reply] = (),
    ) -> None:
        self.state = state
        self.config = config or TurnConfig()
        self.ids = ids or Ids()
        self.replies = list(replies)
        self.log: list[Event] = []
        self.decisions: list[list[Event]] = []
        """Each batch of events the runner would commit together, in order."""

    def run(self, item: Input, max_rounds: int = 1) -> None:
        """`item` decided and committed, then each answer to what it asks, up to
        `max_rounds` decisions in all."""
        asyncio.run(run_until_quiet(self, item, max_rounds))

    def apply(self, events: list[Event]) -> None:
        """Append `events` to the log and fold them in."""
        folded = fold(self.state, events)
        if isinstance(events, Decision):  # the state the shell takes instead of folding again
            assert events.state == folded
        self.state = folded
        self.log += events
        if events:
            self.decisions.append(list(events))

    async def commit(self, item: Input) -> Decision:
        decision = decide_session(self.state, item, self.config, ctx(self.ids))
        self.apply(decision)
        return decision

    async def perform(self, effects: list[Effect]) -> Input | None:
        """The next scripted reply to the model call the state asks for, if any."""
        calls = next((e.calls for e in effects if isinstance(e, Providers)), ())
        if not calls or not self.replies:
            return None
        return ProviderDone(calls[0].turn_id, self.replies.pop(0))


def run_turn(
    state: SessionState,
    replies: list[Reply],
    config: TurnConfig | None = None,
    ids: Ids | None = None,
) -> tuple[SessionState, list[Event]]:
    """Drive the session decider as the shell would, answering its model calls with
    `replies`."""
    session = InMemory(state, config, ids, replies)
    session.run(Tick(), max_rounds=len(replies) + 1)
    return session.state, session.log


def tool_requested(session: str, tool: str, **args: Any) -> ToolInvocationRequested:
    """A read-only, idempotent call's request, as the runner appends it (invocation
    `inv-<session>`), for the executor's tests."""
    return ToolInvocationRequested(
        id="01a20000-0000-7000-8000-00000000fa11",
        time=datetime.now(UTC),
        session_id=session,
        chat_id="c",
        turn_id="t",
        trace_id="tr",
        correlation_id="k",
        source="turn-runner/test",
        data=ToolInvocationRequestedData(
            invocation_id=f"inv-{session}",
            call_id="call-1",
            tool=tool,
            args=args,
            read_only=True,
            idempotent=True,
            timeout_ms=5000,
            iteration=1,
        ),
    )
