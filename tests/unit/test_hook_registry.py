"""Which hook points the registry reports: what decides whether a turn waits on the shell."""

from __future__ import annotations

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
