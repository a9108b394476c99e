"""What the tool-executor reads to check a call's approval (`tool_executor.grounds`): at
most one small request on the common path, none once a session's profile is known, and
the person's facts only when the mode does not allow the call."""

from __future__ import annotations

from typing import Any

from tests.unit.test_justification import answer, attached, configured, event, prompt
from turnstream.bus.contract import StoredEvent
from turnstream.core.approval import AllowRule, ApprovalConfig
from turnstream.core.events import Event, ToolInvocationRequested, ToolInvocationRequestedData
from turnstream.core.justification import Justified, Unjustified
from turnstream.tool_executor.grounds import SessionGrounds


class CountingReads:
    """A session's log in a list, counting the executor's reads of it by kind."""

    def __init__(self, *events: Any) -> None:
        self.events: list[Event] = list(events)
        self.reads: list[str] = []

    async def last_of_kind(self, session_id: str, event_type: str) -> Event | None:
        self.reads.append(event_type)
        found = [e for e in self.events if e.type == event_type and e.session_id == session_id]
        return found[-1] if found else None

    async def read_kind_of(self, session_id: str, event_type: str) -> list[StoredEvent]:
        self.reads.append(event_type)
        return [
            StoredEvent(seq, e)
            for seq, e in enumerate(self.events, 1)
            if e.type == event_type and e.session_id == session_id
        ]


def request(tool: str = "write_file", **args: Any) -> ToolInvocationRequested:
    data = ToolInvocationRequestedData(
        invocation_id="inv1",
        call_id="call1",
        tool=tool,
        args=args or {"path": "notes.txt", "text": "hi"},
        read_only=False,
        idempotent=False,
        timeout_ms=5000,
        iteration=1,
    )
    return event(ToolInvocationRequested, data, "turn-runner/1")  # type: ignore[no-any-return]


async def test_auto_by_default_costs_one_read_each_time() -> None:
    log = CountingReads()
    grounds = SessionGrounds(log, ApprovalConfig(default_mode="auto"))
    for _ in range(3):
        assert isinstance(await grounds.check(request()), Justified)
    assert log.reads == ["SessionConfigured"] * 3  # the profile may come later: not kept


async def test_a_profile_found_is_kept() -> None:
    log = CountingReads(configured("allowlist"))
    rules = (AllowRule("write_file", {"path": "notes*"}),)
    grounds = SessionGrounds(log, ApprovalConfig("ask", rules))
    for _ in range(3):
        verdict = await grounds.check(request())
        assert isinstance(verdict, Justified) and verdict.authority == "allowlist"
    assert log.reads == ["SessionConfigured"]


async def test_only_a_call_the_mode_does_not_allow_reads_the_person_s_facts() -> None:
    log = CountingReads(configured("ask"), attached("read_file"), prompt(), answer("approve"))
    grounds = SessionGrounds(log, ApprovalConfig(default_mode="auto"))
    verdict = await grounds.check(request())
    assert isinstance(verdict, Justified) and verdict.authority == "interaction"
    assert sorted(log.reads) == sorted(
        [
            "SessionConfigured",
            "WorkflowAttached",
            "InteractionRequested",
            "InteractionAnswered",
            "StageGranted",
        ]
    )
    other = await grounds.check(request(path="/etc/passwd", text="x"))
    assert isinstance(other, Unjustified) and "other arguments" in other.reason


async def test_the_kept_profiles_are_bounded() -> None:
    log = CountingReads(configured("auto"))
    grounds = SessionGrounds(log, ApprovalConfig(), known=1)
    await grounds.check(request())
    assert list(grounds.modes) == ["s1"]
    log.events = [e.model_copy(update={"session_id": "s2"}) for e in log.events]
    await grounds.check(request().model_copy(update={"session_id": "s2"}))
    assert list(grounds.modes) == ["s2"]
