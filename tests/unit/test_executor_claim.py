"""The tool-executor asks the log whether a call is justified and creates its claim at once
(issue 41: one round trip, not two, before a call runs), and the concurrency never lets an
unjustified call run: claimed now and not justified, it is failed and its claim marked
done; claimed before, the existing claim decides (as it did)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from tests.unit.factories import tool_requested
from turnstream.core.events import ToolInvocationRequested
from turnstream.core.justification import Justified, Unjustified
from turnstream.tool_executor.app import Executor as ToolExecutor
from turnstream.tool_executor.outcome import Facts

GUARD_S = 10.0
"""Only a broken change waits this long (then the test fails): no timing is asserted."""


class Executor:
    """What `_claim_if_justified` uses of the executor, each round trip held until both
    have been asked (a sequential check would never release them)."""

    def __init__(self, justified: bool, created: bool) -> None:
        self.source = "tool-executor/test"
        self.clock = lambda: datetime.now(UTC)
        self.asked: list[str] = []
        self.both = asyncio.Event()
        self.appended: list[Any] = []
        self.done: list[str] = []
        verdict = Justified("mode", "auto") if justified else Unjustified("no approval")

        async def check(_: ToolInvocationRequested) -> Any:
            return await self.answer("check", verdict)

        async def create(_: ToolInvocationRequested) -> bool:
            return await self.answer("create", created)  # type: ignore[no-any-return]

        async def existing(req: ToolInvocationRequested) -> Facts:
            self.asked.append("existing")
            return Facts(req, self.source, attempt=2)

        async def done(invocation_id: str) -> None:
            self.done.append(invocation_id)

        self.grounds = type("Grounds", (), {"check": staticmethod(check)})()
        self.claims = type(
            "Claims",
            (),
            {
                "expired": staticmethod(lambda _: False),
                "create": staticmethod(create),
                "existing": staticmethod(existing),
                "done": staticmethod(done),
            },
        )()

    async def answer(self, what: str, value: Any) -> Any:
        self.asked.append(what)
        if {"check", "create"} <= set(self.asked):
            self.both.set()
        await self.both.wait()
        return value

    async def _append(self, event: Any) -> None:
        self.appended.append(event)

    async def _deny(self, req: ToolInvocationRequested, reason: str) -> None:
        await ToolExecutor._deny(self, req, reason)  # type: ignore[arg-type]


async def claim(executor: Executor) -> Facts | None:
    return await asyncio.wait_for(
        ToolExecutor._claim_if_justified(executor, tool_requested("s1", "write_file")),  # type: ignore[arg-type]
        GUARD_S,
    )


async def test_a_justified_call_claimed_now_runs_after_one_round_trip() -> None:
    executor = Executor(justified=True, created=True)
    facts = await claim(executor)
    assert facts is not None and facts.attempt == 1
    assert executor.appended == [] and executor.done == []


async def test_an_unjustified_call_claimed_now_is_failed_and_its_claim_marked_done() -> None:
    executor = Executor(justified=False, created=True)
    assert await claim(executor) is None  # never run
    [failed] = executor.appended
    assert failed.type == "ToolInvocationFailed"
    assert failed.data.error.kind == "approval_not_justified"
    assert executor.done == ["inv-s1"]  # a redelivery finds it done: not run either


async def test_a_call_claimed_before_is_decided_by_its_claim_as_it_was() -> None:
    executor = Executor(justified=False, created=False)
    facts = await claim(executor)
    assert facts is not None and facts.attempt == 2
    assert executor.asked[-1] == "existing" and executor.appended == []
