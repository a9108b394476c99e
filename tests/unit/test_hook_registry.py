"""Which hook points the registry reports: what decides whether a turn waits on the shell."""

from __future__ import annotations

import logging

import pytest

from turnstream.core.events import RequestChange
from turnstream.core.turn import (
    HookPoint,
    HookSubject,
    Message,
    ProviderRequest,
    ToolCallState,
    ToolInfo,
)
from turnstream.hooks import HookCall, HookRegistry, HookReply, HookSpec


async def _continue(call: HookCall) -> HookReply:
    return HookReply(action="continue")


def test_a_catch_all_stage_guard_is_no_workflow_gate_or_assert() -> None:
    everywhere = HookSpec(name="audit-all", stage="*", point="pre", kind="guard")
    registry = HookRegistry([(everywhere, _continue)])
    assert registry.workflow_hooks == frozenset()
    assert registry.has_tool_hooks  # it still guards every turn stage


def test_a_guard_named_for_a_workflow_point_makes_it_one() -> None:
    gate = HookSpec(name="ready", stage="CheckGate", point="pre", kind="guard")
    registry = HookRegistry([(gate, _continue)])
    assert registry.workflow_hooks == frozenset({"CheckGate"})


# -- the turn's hook points (hooks/points.py) ------------------------------------------


def _spec(name: str, stage: str, point: str = "pre", kind: str = "transform", priority: int = 100):
    return HookSpec(name=name, stage=stage, point=point, kind=kind, priority=priority)  # type: ignore[arg-type]


def _replying(reply: HookReply, seen: list[HookCall] | None = None):
    async def hook(call: HookCall) -> HookReply:
        if seen is not None:
            seen.append(call)
        return reply

    return hook


def _request() -> HookSubject:
    tools = tuple(
        ToolInfo(n, n, {"type": "object"}, True, True, 1.0) for n in ("read_file", "grep")
    )
    request = ProviderRequest("s1", "t1", 1, 0, "sys", (Message("user", "hi"),), tools)
    return HookSubject(request=request, model="demo")


def test_a_catch_all_guard_keeps_to_the_input_and_the_reply() -> None:
    registry = HookRegistry([(_spec("all", "*", kind="guard"), _continue)])
    assert registry.stage_hooks == frozenset({HookPoint.RECEIVE_INPUT, HookPoint.RENDER})
    named = HookRegistry(
        [
            (_spec("req", "SEND_REQUEST"), _continue),
            (_spec("resp", "STREAM_RESPONSE", "post"), _continue),
            (_spec("res", "TOOL_CALL", "post"), _continue),
            (_spec("cmp", "COMPACT"), _continue),
            (_spec("stop", "STOP", kind="guard"), _continue),
        ]
    )
    assert named.stage_hooks == frozenset(
        {HookPoint.SEND_REQUEST, HookPoint.STREAM_RESPONSE, HookPoint.TOOL_RESULT}
        | {HookPoint.COMPACT, HookPoint.STOP}
    )
    assert not named.has_tool_hooks  # TOOL_CALL post is not the per-call pre guard


async def test_request_changes_add_up_and_the_next_hook_sees_the_first_ones() -> None:
    seen: list[HookCall] = []
    first = HookReply(action="modify", request=RequestChange(model="small", tools=["grep", "rm"]))
    second = HookReply(action="modify", request=RequestChange(system="terse"))
    registry = HookRegistry(
        [
            (_spec("a", "SEND_REQUEST", priority=1), _replying(first)),
            (_spec("b", "SEND_REQUEST", priority=2), _replying(second, seen)),
        ]
    )
    verdict = await registry.run_stage_hooks("s1", "t1", HookPoint.SEND_REQUEST, _request())
    assert verdict.action == "modify" and verdict.hook == "b"
    assert verdict.request == RequestChange(model="small", system="terse", tools=["grep"])
    assert seen[0].request is not None
    assert (seen[0].request.model, seen[0].request.tools) == ("small", ["grep"])


async def test_an_answer_the_point_cannot_take_is_logged_and_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = HookRegistry(
        [
            (_spec("v", "SEND_REQUEST", kind="guard"), _replying(HookReply(action="veto"))),
            (_spec("m", "SEND_REQUEST"), _replying(HookReply(action="modify"))),
            (_spec("i", "STOP"), _replying(HookReply(action="iterate"))),
        ]
    )
    with caplog.at_level(logging.WARNING, "turnstream.hooks"):
        request = await registry.run_stage_hooks("s1", "t1", HookPoint.SEND_REQUEST, _request())
        stop = await registry.run_stage_hooks("s1", "t1", HookPoint.STOP, HookSubject(text="x"))
    assert request.action == stop.action == "continue"
    assert "`veto`, which SEND_REQUEST does not take" in caplog.text
    assert "`modify` without `request`" in caplog.text
    assert "`iterate` without the `text`" in caplog.text


async def test_a_stop_hook_iterates_and_a_guard_vetoes_a_compaction() -> None:
    again = HookReply(action="iterate", text="Run the tests first.", reason="untested")
    veto = HookReply(action="veto", reason="keep it")
    registry = HookRegistry(
        [
            (_spec("tests", "STOP", kind="guard"), _replying(again)),
            (_spec("keep", "COMPACT", kind="guard"), _replying(veto)),
        ]
    )
    stop = await registry.run_stage_hooks("s1", "t1", HookPoint.STOP, HookSubject(text="done"))
    assert (stop.action, stop.text, stop.hook) == ("iterate", "Run the tests first.", "tests")
    dropped = HookSubject(dropped=(Message("user", "old"),))
    compact = await registry.run_stage_hooks("s1", "t1", HookPoint.COMPACT, dropped)
    assert (compact.action, compact.reason) == ("veto", "keep it")


async def test_the_tool_interceptor_sees_each_executed_result_in_call_order() -> None:
    seen: list[HookCall] = []

    async def redact(call: HookCall) -> HookReply:
        seen.append(call)
        if "secret" in (call.output or ""):
            return HookReply(action="modify", output="[redacted]", is_error=False)
        return HookReply(action="continue")

    registry = HookRegistry([(_spec("redact", "TOOL_CALL", "post"), redact)])
    calls = tuple(
        ToolCallState(
            f"inv{i}", f"c{i}", "read_file", {"p": i}, i, True, True, 1000, "succeeded", out
        )
        for i, out in enumerate(["fine", "a secret"])
    )
    verdict = await registry.run_stage_hooks(
        "s1", "t1", HookPoint.TOOL_RESULT, HookSubject(calls=calls)
    )
    assert [c.invocation_id for c in seen] == ["inv0", "inv1"]
    assert (seen[1].stage, seen[1].point, seen[1].tool) == ("TOOL_CALL", "post", "read_file")
    assert verdict.action == "modify"
    assert [(r.invocation_id, r.output) for r in verdict.results] == [("inv1", "[redacted]")]
