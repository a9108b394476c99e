"""The TOOL_CALL stage of the pure turn core: proposals, ordering, results, bounds, hooks."""

from __future__ import annotations

from datetime import timedelta

from tests.unit.factories import T0, Ids, accepted, ctx, fact, interrupt, succeed, success
from turnstream.core.events import (
    FailureClass,
    HookDecided,
    ToolCallApproved,
    ToolCallApprovedData,
    ToolCallDenied,
    ToolCallDeniedData,
    ToolError,
    ToolInvocationFailed,
    ToolInvocationFailedData,
    ToolInvocationProposed,
    ToolInvocationRequested,
    TurnEnded,
    unmerged,
)
from turnstream.core.session import SessionState, fold, follow_session
from turnstream.core.turn import (
    HookVerdict,
    ToolCall,
    ToolInfo,
    TurnConfig,
    awaiting_hooks,
    compose_request,
    on_hook_verdicts,
    on_provider_result,
)

TOOLS = (
    ToolInfo("read_file", "read", {"type": "object"}, True, True, 5.0),
    ToolInfo("grep", "search", {"type": "object"}, True, True, 5.0),
    ToolInfo("write_file", "write", {"type": "object"}, False, False, 7.0),
)
CONFIG = TurnConfig(tools=TOOLS)


def calls(*names: str) -> tuple[ToolCall, ...]:
    return tuple(ToolCall(f"c{i}", name, {"path": f"p{i}"}) for i, name in enumerate(names))


def tool_reply(*names: str):
    from dataclasses import replace

    return replace(success("", "tool_use"), tool_calls=calls(*names))


def approve(inv: str):
    return fact(ToolCallApproved, ToolCallApprovedData, invocation_id=inv, authority="mode")


def deny(inv: str):
    return fact(
        ToolCallDenied, ToolCallDeniedData, invocation_id=inv, authority="mode", reason="no"
    )


def fail(inv: str):
    error = ToolError(error_class=FailureClass.TOOL_RUNTIME_ERROR, kind="io_error", detail="boom")
    return fact(ToolInvocationFailed, ToolInvocationFailedData, invocation_id=inv, error=error)


class Driver:
    """Plays the shell: feeds facts, collects the decider's events."""

    def __init__(self, config: TurnConfig = CONFIG, *names: str) -> None:
        self.config, self.c = config, ctx(Ids())
        self.state = fold(SessionState.of("s1"), [accepted(1, "do it")])
        self.log = self.step(follow_session(self.state, config, self.c))
        self.log += self.step(
            on_provider_result(self.state.chat, tool_reply(*names), config, self.c)
        )

    def step(self, events):
        self.state = fold(self.state, events)
        return list(events)

    def feed(self, *facts):
        out = []
        for f in facts:
            self.state = fold(self.state, [f])
            out += self.step(follow_session(self.state, self.config, self.c))
        self.log += out
        return out

    def proposals(self) -> list[ToolInvocationProposed]:
        return [e for e in self.log if isinstance(e, ToolInvocationProposed)]

    def inv(self, i: int) -> str:
        return self.proposals()[i].data.invocation_id


def requested(events) -> list[str]:
    return [e.data.tool for e in events if isinstance(e, ToolInvocationRequested)]


def test_each_call_is_proposed_in_order_then_the_turn_waits() -> None:
    d = Driver(CONFIG, "read_file", "write_file")
    props = d.proposals()
    assert [p.data.tool for p in props] == ["read_file", "write_file"]
    assert [p.data.index for p in props] == [0, 1]
    assert [p.data.read_only for p in props] == [True, False]
    assert d.log[-1].type == "ToolInvocationProposed"
    assert list(follow_session(d.state, CONFIG, d.c)) == []


def test_consecutive_read_only_calls_are_requested_together() -> None:
    d = Driver(CONFIG, "read_file", "grep", "write_file", "read_file")
    assert requested(d.feed(approve(d.inv(0)))) == ["read_file"]
    assert requested(d.feed(approve(d.inv(1)))) == ["grep"]
    # the mutating call waits for both reads to finish
    assert requested(d.feed(approve(d.inv(2)), approve(d.inv(3)))) == []
    assert requested(d.feed(succeed(d.inv(0)))) == []
    assert requested(d.feed(succeed(d.inv(1)))) == ["write_file"]
    # the read after the write waits for the write
    assert requested(d.feed(succeed(d.inv(2)))) == ["read_file"]
    end = d.feed(succeed(d.inv(3)))
    assert [e.type for e in unmerged(end)][:2] == ["StagePostFired", "StagePreFired"]


def test_requests_carry_the_tool_timeout_and_idempotency() -> None:
    d = Driver(CONFIG, "write_file")
    (req,) = [e for e in d.feed(approve(d.inv(0))) if isinstance(e, ToolInvocationRequested)]
    assert req.data.timeout_ms == 7000 and req.data.idempotent is False
    assert req.data.args == {"path": "p0"} and req.data.call_id == "c0"


def test_results_join_the_history_in_call_order_for_the_next_request() -> None:
    d = Driver(CONFIG, "read_file", "grep")
    d.feed(approve(d.inv(0)), approve(d.inv(1)))
    d.feed(succeed(d.inv(1), "second"), fail(d.inv(0)))
    request = compose_request(d.state.chat, CONFIG)
    tools = [m for m in request.messages if m.role == "tool"]
    assert [m.tool_call_id for m in tools] == ["c0", "c1"]
    assert tools[0].is_error and "io_error" in tools[0].text
    assert tools[1].text == "second" and not tools[1].is_error
    assistant = next(m for m in request.messages if m.role == "assistant")
    assert [c.name for c in assistant.tool_calls] == ["read_file", "grep"]
    assert request.iteration == 2


def test_a_denied_call_returns_a_typed_result_and_the_rest_go_on() -> None:
    d = Driver(CONFIG, "write_file", "read_file")
    assert requested(d.feed(deny(d.inv(0)))) == []
    assert requested(d.feed(approve(d.inv(1)))) == ["read_file"]
    d.feed(succeed(d.inv(1)))
    tools = [m for m in compose_request(d.state.chat, CONFIG).messages if m.role == "tool"]
    assert tools[0].is_error and tools[0].text.startswith("policy_denied (mode)")


def test_an_unknown_tool_fails_at_once_without_asking_anyone() -> None:
    d = Driver(CONFIG, "launch_rockets")
    (proposal,) = d.proposals()
    assert proposal.data.known is False
    failed = [e for e in d.log if isinstance(e, ToolInvocationFailed)]
    assert failed and failed[0].data.error.kind == "unknown_tool"
    assert "read_file" in failed[0].data.error.detail
    # straight on to the next model call, with the error as the call's result
    assert d.log[-1].type == "ProviderRequestStarted" and d.log[-1].data.iteration == 2


def test_a_full_round_trip_ends_with_one_completed_turn() -> None:
    d = Driver(CONFIG, "read_file")
    d.feed(approve(d.inv(0)))
    d.feed(succeed(d.inv(0), "file text"))
    final = on_provider_result(d.state.chat, success("the file says hi"), CONFIG, d.c)
    d.log += d.step(final)
    ended = [e for e in d.log if isinstance(e, TurnEnded)]
    assert len(ended) == 1 and ended[0].data.status == "completed"
    assert ended[0].data.reply == "the file says hi"
    assert ended[0].data.iterations == 2
    assert d.state.chat.active is None


def test_max_tool_calls_per_turn_ends_the_turn() -> None:
    config = TurnConfig(tools=TOOLS, max_tool_calls_per_turn=2)
    d = Driver(config, "read_file", "grep", "read_file")
    ended = [e for e in d.log if isinstance(e, TurnEnded)]
    assert len(ended) == 1 and ended[0].data.failure_class is FailureClass.LIMIT_EXCEEDED
    assert "maxToolCallsPerTurn=2" in (ended[0].data.reason or "")
    assert "may have completed" in (ended[0].data.next_action or "")
    assert d.proposals() == []


def test_max_iterations_counts_tool_rounds() -> None:
    config = TurnConfig(tools=TOOLS, max_iterations=1)
    d = Driver(config, "read_file")
    d.feed(approve(d.inv(0)))
    out = d.feed(succeed(d.inv(0)))
    ended = [e for e in out if isinstance(e, TurnEnded)]
    assert ended and ended[0].data.failure_class is FailureClass.LIMIT_EXCEEDED
    assert "maxIterations=1" in (ended[0].data.reason or "")


def test_the_turn_wall_time_bound_ends_a_waiting_turn() -> None:
    d = Driver(TurnConfig(tools=TOOLS, max_turn_seconds=60), "read_file")
    later = ctx(Ids("t"), at=T0 + timedelta(seconds=61))
    out = follow_session(d.state, d.config, later)
    ended = [e for e in out if isinstance(e, TurnEnded)]
    assert ended and ended[0].data.failure_class is FailureClass.TIMEOUT
    assert out[0].type == "StagePostFired" and out[0].data.outcome == "failed"
    assert (
        list(follow_session(d.state, d.config, ctx(Ids("u"), at=T0 + timedelta(seconds=59)))) == []
    )


def test_hooks_see_approved_calls_before_they_are_requested() -> None:
    config = TurnConfig(tools=TOOLS, tool_hooks=True)
    d = Driver(config, "read_file", "write_file")
    assert requested(d.feed(approve(d.inv(0)), approve(d.inv(1)))) == []
    waiting = awaiting_hooks(d.state.chat, config)
    assert [c.tool for c in waiting] == ["read_file"]
    verdict = HookVerdict(d.inv(0), "modify", hook="redact", kind="transform", args={"path": "q"})
    out = on_hook_verdicts(d.state.chat, [verdict], config, d.c)
    d.log += d.step(out)
    (hook,) = [e for e in out if isinstance(e, HookDecided)]
    assert hook.data.action == "modify" and hook.data.args == {"path": "q"}
    (req,) = [e for e in out if isinstance(e, ToolInvocationRequested)]
    assert req.data.args == {"path": "q"}
    d.feed(succeed(d.inv(0)))
    waiting = awaiting_hooks(d.state.chat, config)
    assert [c.tool for c in waiting] == ["write_file"]
    denied = on_hook_verdicts(
        d.state.chat,
        [HookVerdict(d.inv(1), "deny_tool", hook="no-writes", reason="read-only day")],
        config,
        d.c,
    )
    d.log += d.step(denied)
    tools = [m for m in compose_request(d.state.chat, config).messages if m.role == "tool"]
    assert tools[1].is_error and "no-writes" in tools[1].text


def test_a_hook_abort_ends_the_turn_with_its_class() -> None:
    config = TurnConfig(tools=TOOLS, tool_hooks=True)
    for action, failure in (
        ("abort_turn", FailureClass.POLICY_DENIED),
        ("hard_abort", FailureClass.INTERRUPTED),
    ):
        d = Driver(config, "read_file")
        d.feed(approve(d.inv(0)))
        out = on_hook_verdicts(
            d.state.chat, [HookVerdict(d.inv(0), action, hook="h", reason="stop")], config, d.c
        )
        ended = [e for e in out if isinstance(e, TurnEnded)]
        assert len(ended) == 1 and ended[0].data.failure_class is failure
        assert not [e for e in out if isinstance(e, ToolInvocationRequested)]


def test_facts_for_another_turn_or_twice_change_nothing() -> None:
    d = Driver(CONFIG, "read_file")
    before = d.state
    stale = fact(
        ToolCallApproved, ToolCallApprovedData, turn="old", invocation_id=d.inv(0), authority="mode"
    )
    assert fold(before, [stale]) == before
    d.feed(approve(d.inv(0)))
    once = d.state
    assert fold(once, [approve(d.inv(0))]).chat.active.calls == once.chat.active.calls


def test_stage_hooks_gate_receive_input_and_render() -> None:
    from turnstream.core.turn import (
        HookPoint,
        StageHookVerdict,
        awaiting_stage_hooks,
        on_stage_hooks,
    )

    config = TurnConfig(
        tools=TOOLS, stage_hooks=frozenset({HookPoint.RECEIVE_INPUT, HookPoint.RENDER})
    )
    c = ctx(Ids())
    state = fold(SessionState.of("s1"), [accepted(1, "my password is hunter2")])
    events = follow_session(state, config, c)
    state = fold(state, events)
    assert (
        events[-1].type == "StagePreFired"
        and awaiting_stage_hooks(state.chat, config) is HookPoint.RECEIVE_INPUT
    )
    redacted = StageHookVerdict(
        HookPoint.RECEIVE_INPUT, "modify", "redact", "transform", text="my password is ***"
    )
    state = fold(state, on_stage_hooks(state.chat, redacted, config, c))
    request = compose_request(state.chat, config)
    assert request.messages[-1].text == "my password is ***"
    state = fold(state, on_provider_result(state.chat, success("Sure, SECRET"), config, c))
    assert awaiting_stage_hooks(state.chat, config) is HookPoint.RENDER
    masked = StageHookVerdict(HookPoint.RENDER, "modify", "mask", "transform", text="Sure, ***")
    out = on_stage_hooks(state.chat, masked, config, c)
    ended = [e for e in out if isinstance(e, TurnEnded)]
    assert ended[0].data.reply == "Sure, ***"
    assert [e.data.text for e in out if e.type == "RenderEmitted"] == ["Sure, ***"]


def test_a_stage_guard_abort_ends_the_turn_before_the_model_is_called() -> None:
    from turnstream.core.turn import HookPoint, StageHookVerdict, on_stage_hooks

    config = TurnConfig(stage_hooks=frozenset({HookPoint.RECEIVE_INPUT}))
    c = ctx(Ids())
    state = fold(SessionState.of("s1"), [accepted(1, "")])
    state = fold(state, follow_session(state, config, c))
    empty = StageHookVerdict(
        HookPoint.RECEIVE_INPUT, "abort_turn", "not-empty", reason="empty input"
    )
    out = on_stage_hooks(state.chat, empty, config, c)
    ended = [e for e in out if isinstance(e, TurnEnded)]
    assert ended[0].data.failure_class is FailureClass.POLICY_DENIED
    assert "empty input" in (ended[0].data.reason or "")
    assert not [e for e in out if e.type == "ProviderRequestStarted"]


def test_a_tool_call_complete_mid_stream_is_proposed_and_run_before_the_stream_ends() -> None:
    from dataclasses import replace as dc_replace

    from turnstream.core.turn import on_tool_call_ready

    c = ctx(Ids())
    state = fold(SessionState.of("s1"), [accepted(1, "go")])
    log = follow_session(state, CONFIG, c)
    state = fold(state, log)
    call = ToolCall("c0", "read_file", {"path": "p0"})
    early = on_tool_call_ready(state.chat, call, T0, CONFIG, c)
    early_kinds = [e.type for e in unmerged(early)]
    assert early_kinds == ["StagePostFired", "StagePreFired", "ToolInvocationProposed"]
    state = fold(state, early)
    assert list(on_tool_call_ready(state.chat, call, T0, CONFIG, c)) == []  # once
    inv = early[-1].data.invocation_id
    state = fold(state, [approve(inv)])
    running = follow_session(state, CONFIG, c)
    assert requested(running) == ["read_file"]  # runs while the model still streams
    state = fold(state, [*running, succeed(inv, "file text")])
    reply = dc_replace(success("", "tool_use"), tool_calls=(call, ToolCall("c1", "grep", {})))
    rest = on_provider_result(state.chat, reply, CONFIG, c)
    proposals = [e for e in rest if isinstance(e, ToolInvocationProposed)]
    assert [p.data.call_id for p in proposals] == ["c1"]  # c0 is not proposed twice
    assert [e.type for e in unmerged(rest)][:2] == ["ProviderRequestCompleted", "StagePostFired"]
    state = fold(state, rest)
    assert [c.call_id for c in state.chat.active.calls] == ["c0", "c1"]
    assert [c.index for c in state.chat.active.calls] == [0, 1]


def test_a_hard_interrupt_ends_the_turn_at_once_even_mid_call() -> None:
    d = Driver(CONFIG, "slow", "read_file")  # waiting for approvals
    out = d.feed(interrupt("hard"))
    ended = [e for e in out if isinstance(e, TurnEnded)]
    assert len(ended) == 1 and ended[0].data.failure_class is FailureClass.INTERRUPTED
    assert "ana" in (ended[0].data.reason or "") and ended[0].data.next_action
    assert out[0].type == "StagePostFired" and out[0].data.outcome == "failed"
    c = ctx(Ids("q"))
    state = fold(SessionState.of("s1"), [accepted(1)])
    state = fold(state, follow_session(state, CONFIG, c))  # now waiting for the model
    out = follow_session(fold(state, [interrupt("hard")]), CONFIG, c)
    assert [e.type for e in out][-2:] == ["TurnEnded", "SessionTurnEnd"]


def test_a_graceful_interrupt_skips_remaining_tools_and_asks_for_a_summary() -> None:
    from turnstream.core.events import ToolInvocationCancelled

    d = Driver(CONFIG, "read_file", "write_file", "grep")
    d.feed(approve(d.inv(0)))  # read_file runs
    out = d.feed(interrupt("graceful"))
    cancelled = {e.data.invocation_id for e in out if isinstance(e, ToolInvocationCancelled)}
    assert cancelled == {d.inv(1), d.inv(2)}  # not started: skipped; the running one finishes
    assert out[0].type == "SteeringInjected"
    out = d.feed(succeed(d.inv(0), "file text"))
    request = compose_request(d.state.chat, CONFIG)
    assert request.tools == ()  # the summary round offers no tools
    assert "interrupted" in request.messages[-1].text
    tools = [m for m in request.messages if m.role == "tool"]
    assert [m.is_error for m in tools] == [False, True, True]  # every call has a result
    # even if the model calls a tool in the summary round, the turn renders and ends
    reply = tool_reply("grep")
    final = on_provider_result(d.state.chat, reply, CONFIG, d.c)
    ended = [e for e in final if isinstance(e, TurnEnded)]
    assert ended and ended[0].data.status == "completed"
    proposals = [e for e in final if isinstance(e, ToolInvocationProposed)]
    assert proposals and all(p.data.skip for p in proposals)


def test_an_interrupt_with_no_turn_running_changes_nothing() -> None:
    state = SessionState.of("s1")
    assert fold(state, [interrupt("hard")]) == state


def test_the_calls_a_response_asks_for_are_held_by_its_phases_until_they_are_made() -> None:
    """The round's response (its calls, the reply before it) is held by STREAM_RESPONSE;
    the calls go on into TOOL_CALL; once their results are in, no phase holds them."""
    d = Driver(CONFIG, "read_file")
    seen = fold(SessionState.of("s1"), [accepted(1, "do it")])
    held = []
    for event in unmerged(d.log):
        seen = fold(seen, [event])
        turn = seen.chat.active
        assert turn is not None
        held.append((turn.phase.kind, turn.requested_calls, turn.round_reply is not None))
    asked = calls("read_file")
    assert held[0] == ("receiving", (), False)
    assert ("responded", asked, True) in held and ("calling_tools", asked, False) in held
    assert all(c == () and not r for k, c, r in held if k not in ("responded", "calling_tools"))
    d.feed(approve(d.inv(0)))
    d.feed(succeed(d.inv(0)))
    turn = d.state.chat.active
    assert turn is not None and turn.phase.kind != "calling_tools"
    assert turn.requested_calls == () and turn.round_reply is None
