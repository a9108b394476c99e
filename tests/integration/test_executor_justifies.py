"""The tool-executor runs a call only when the log justifies it (`core.justification`),
over a real nats-server: a `ToolInvocationRequested` alone, whoever approved it, runs only
by the session's mode, an allowlist rule, an attached workflow's stage or a person's
approval of this very call; any other is failed `policy_denied` and never run."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import events_of, only, settings_for
from tests.integration.test_tools_path import registry, requested, script
from tests.unit.test_justification import answer, attached, configured, prompt
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.core.events import ToolInvocationFailed, ToolInvocationSucceeded
from turnstream.core.justification import ToolCall
from turnstream.tool_executor import app as tool_executor

CALL = ToolCall("", "slow_write", {"ms": 1})
"""What `requested` asks (its invocation set per case)."""

CASES: dict[str, tuple[Callable[[str], list[Any]], bool]] = {
    "nothing": (lambda _inv: [], False),
    "profile-auto": (lambda _inv: [configured("auto")], True),
    "profile-ask": (lambda _inv: [configured("ask")], False),
    "person-approved": (lambda inv: [prompt(_call(inv)), answer("approve")], True),
    "person-denied": (lambda inv: [prompt(_call(inv)), answer("deny")], False),
    "asked-other-args": (lambda inv: [prompt(_call(inv), ms=999), answer("approve")], False),
    "stage-allows": (lambda _inv: [attached("slow_read", "slow_write")], True),
    "stage-does-not": (lambda _inv: [attached("slow_read")], False),
}


def _call(invocation: str) -> ToolCall:
    return ToolCall(invocation, CALL.tool, CALL.args)


@pytest.fixture(scope="module", params=[1, 4])
def log_partitions(request: pytest.FixtureRequest) -> int:
    """One log stream, and a log of 4 partitions (each session's reads name its stream)."""
    return int(request.param)


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    (tmp_path / "workspace").mkdir()
    return tmp_path


async def run_request(bus: Bus, settings: Any, session: str, facts: list[Any]) -> list[Any]:
    """Append `facts` to `session`, then a request to run `slow_write` with only the
    executor running; the session's events once the request has its result."""
    invocation = f"inv-{session}"
    facts = [f.model_copy(update={"session_id": session, "id": f"{f.id}-{session}"}) for f in facts]
    stop = asyncio.Event()
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(tool_executor.serve(settings, stop, tools=registry()))
        await bus.store.append_facts(facts)
        number = f"{abs(hash(session)) % 10**12:012d}"
        await bus.store.append_facts([requested(number, session, invocation, "slow_write")])
        try:
            for _ in range(200):
                events = await events_of(bus, session)
                if only(events, ToolInvocationFailed) or only(events, ToolInvocationSucceeded):
                    return events
                await asyncio.sleep(0.05)
            raise AssertionError(f"no result for {session}")
        finally:
            stop.set()


@pytest.mark.parametrize("case", list(CASES))
async def test_in_ask_mode_a_call_runs_only_when_the_log_justifies_it(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path, case: str
) -> None:
    settings = settings_for(nats_server, tmp, security_mode="ask", script=script(tmp, "{}"))
    session = f"just-{case}"
    make, runs = CASES[case]
    events = await run_request(bus, settings, session, make(f"inv-{session}"))
    ran = (tmp / "workspace" / "slow_write.runs").exists()
    if runs:
        assert len(only(events, ToolInvocationSucceeded)) == 1 and ran
        return
    assert not ran and not only(events, ToolInvocationSucceeded)
    (failed,) = only(events, ToolInvocationFailed)
    assert failed.data.error.error_class == "policy_denied"
    assert failed.data.error.kind == "approval_not_justified"
    assert "not justified by the log" in failed.data.error.detail
    assert not failed.data.may_have_run


@pytest.mark.parametrize(("pattern", "runs"), [("slow_*", True), ("slow_read", False)])
async def test_an_allowlist_rule_of_the_executor_s_settings(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path, pattern: str, runs: bool
) -> None:
    settings = settings_for(
        nats_server,
        tmp,
        security_mode="allowlist",
        allowlist=[{"tool": pattern, "args": {"ms": "1"}}],
        script=script(tmp, "{}"),
    )
    events = await run_request(bus, settings, f"allow-{runs}", [])
    assert bool(only(events, ToolInvocationSucceeded)) is runs
    assert (tmp / "workspace" / "slow_write.runs").exists() is runs
