"""The turn's hook points in the pure core: the LLM interceptor (request and response), the
tool interceptor (results), the compaction interceptor and the stop hook. Each change is a
`HookDecided` in the log, and folding the log again gives the same turn and request."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from tests.unit.factories import Ids, InMemory, accepted, fact, succeed, success
from turnstream.core.events import (
    CompactionChange,
    ContextCompacted,
    FailureClass,
    HistoryMessage,
    HookDecided,
    ProviderRequestStarted,
    RequestChange,
    ResponseChange,
    StagePreFired,
    ToolCallApproved,
    ToolCallApprovedData,
    ToolInvocationProposed,
    ToolInvocationRequested,
    ToolUseBlock,
    TurnEnded,
    unmerged,
)
from turnstream.core.fold import Decision
from turnstream.core.inputs import Fact, Tick
from turnstream.core.session import SessionState, fold
from turnstream.core.session.decider import (
    Effect,
    Input,
    ProviderDone,
    Providers,
    RunStageHooks,
    StageHooksSaid,
)
from turnstream.core.turn import (
    HookPoint,
    HookSubject,
    HookVerdict,
    ProviderFailure,
    ProviderSuccess,
    StageHookVerdict,
    ToolCall,
    ToolInfo,
    TurnConfig,
    compose_request,
)

TOOLS = (
    ToolInfo("read_file", "read", {"type": "object"}, True, True, 5.0),
    ToolInfo("grep", "search", {"type": "object"}, True, True, 5.0),
)
Answer = Callable[[HookSubject], StageHookVerdict]
TOO_LONG = ProviderFailure("prompt_too_long", "prompt is too long", False, success().finished_at)


class Shell(InMemory):
    """Plays the turn-runner, approval service and executor in memory, through the
    runner's loop (`InMemory`): runs the hooks it is given, answers model calls from
    `replies`, approves every call, answers each with `outputs[tool]`."""

    def __init__(
        self,
        config: TurnConfig,
        hooks: dict[HookPoint, Answer],
        replies: list[ProviderSuccess | ProviderFailure],
        outputs: dict[str, str] | None = None,
        state: SessionState | None = None,
    ) -> None:
        config = replace(config, stage_hooks=frozenset(hooks))
        super().__init__(state or SessionState.of("s1"), config, Ids("h"), replies)
        self.hooks, self.outputs = hooks, outputs or {}
        self.seen: dict[HookPoint, list[HookSubject]] = {}
        self.requests: list = []
        self.queue: list[Input] = []
        """Answers waiting their turn: other services' facts, hook verdicts, model replies."""

    def run(self, item: Input, max_rounds: int = 1000) -> None:
        super().run(item, max_rounds)

    async def commit(self, item: Input) -> Decision:
        if isinstance(item, Fact):  # what another service appended
            self.apply([item.event])
            item = Tick()
        decision = await super().commit(item)
        for event in decision:
            if isinstance(event, ToolInvocationProposed) and event.data.known:
                inv = event.data.invocation_id
                approved = fact(
                    ToolCallApproved, ToolCallApprovedData, invocation_id=inv, authority="mode"
                )
                self.queue.append(Fact(approved))
            if isinstance(event, ToolInvocationRequested):
                out = self.outputs.get(event.data.tool, "ok")
                self.queue.append(Fact(succeed(event.data.invocation_id, out)))
        return decision

    async def perform(self, effects: list[Effect]) -> Input | None:
        for effect in effects:
            if isinstance(effect, RunStageHooks):
                self.seen.setdefault(effect.stage, []).append(effect.subject)
                said = self.hooks[effect.stage](effect.subject)
                self.queue.append(StageHooksSaid(effect.turn_id, said))
            if isinstance(effect, Providers) and effect.calls and self.replies:
                request = effect.calls[0]
                self.requests.append(request)
                self.queue.append(ProviderDone(request.turn_id, self.replies.pop(0)))
        return self.queue.pop(0) if self.queue else None

    def events(self, cls: type) -> list:
        return [e for e in self.log if isinstance(e, cls)]

    def replayed(self) -> SessionState:
        return fold(SessionState.of("s1"), self.log)


def start(shell: Shell, text: str = "hello") -> Shell:
    shell.run(Fact(accepted(1, text)))
    return shell


def test_an_llm_interceptor_changes_the_request_and_the_log_says_how() -> None:
    change = RequestChange(
        model="claude-small",
        system="Be terse.",
        tools=["grep", "no_such_tool"],
        messages=[HistoryMessage(role="user", text="hello (redacted)")],
    )

    def narrow(subject: HookSubject) -> StageHookVerdict:
        return StageHookVerdict(
            HookPoint.SEND_REQUEST, "modify", "narrow", "transform", request=change
        )

    config = TurnConfig(tools=TOOLS, system_prompt="You help.")
    shell = start(Shell(config, {HookPoint.SEND_REQUEST: narrow}, [success("hi")]))
    seen = shell.seen[HookPoint.SEND_REQUEST][0]
    assert seen.model == "demo" and seen.request is not None
    offered = [t.name for t in seen.request.tools]
    assert seen.request.system == "You help." and offered[:2] == ["read_file", "grep"]
    (decided,) = shell.events(HookDecided)
    assert (decided.data.stage, decided.data.point, decided.data.request) == (
        "SEND_REQUEST",
        "pre",
        change,
    )
    (started,) = shell.events(ProviderRequestStarted)
    assert started.data.model == "claude-small" and started.data.tools == ["grep"]
    sent = shell.requests[0]
    assert sent.model == "claude-small" and sent.system == "Be terse."
    assert [m.text for m in sent.messages] == ["hello (redacted)"]
    assert shell.events(TurnEnded)[0].data.status == "completed"
    # the log alone composes the same request: fold up to the start of the call
    at = shell.log.index(started)
    assert (
        compose_request(fold(SessionState.of("s1"), shell.log[: at + 1]).chat, shell.config) == sent
    )


def test_a_request_change_holds_for_its_own_request_only() -> None:
    asked = []

    def once(subject: HookSubject) -> StageHookVerdict:
        asked.append(subject.request.iteration if subject.request else None)
        if len(asked) == 1:
            return StageHookVerdict(
                HookPoint.SEND_REQUEST, "modify", "m", request=RequestChange(model="other")
            )
        return StageHookVerdict(HookPoint.SEND_REQUEST, "continue")

    tool_call = replace(success("", "tool_use"), tool_calls=(ToolCall("c0", "read_file", {}),))
    shell = start(
        Shell(TurnConfig(tools=TOOLS), {HookPoint.SEND_REQUEST: once}, [tool_call, success("done")])
    )
    assert asked == [1, 2]
    assert [e.data.model for e in shell.events(ProviderRequestStarted)] == ["other", "demo"]
    assert [r.model for r in shell.requests] == ["other", None]


def test_an_llm_interceptor_stops_the_turn_before_the_model_is_called() -> None:
    def block(_: HookSubject) -> StageHookVerdict:
        return StageHookVerdict(
            HookPoint.SEND_REQUEST, "abort_turn", "budget", "guard", reason="over budget"
        )

    shell = start(Shell(TurnConfig(), {HookPoint.SEND_REQUEST: block}, [success()]))
    assert not shell.events(ProviderRequestStarted) and not shell.requests
    (ended,) = shell.events(TurnEnded)
    assert ended.data.failure_class is FailureClass.POLICY_DENIED
    assert "over budget" in (ended.data.reason or "") and ended.data.next_action


def test_a_response_interceptor_replaces_the_response_before_the_turn_acts_on_it() -> None:
    streamed = replace(
        success("I will read /etc/shadow", "tool_use"),
        tool_calls=(ToolCall("c0", "read_file", {"path": "/etc/shadow"}),),
    )

    def vet(subject: HookSubject) -> StageHookVerdict:
        assert subject.response is not None and subject.response.tool_calls[0].name == "read_file"
        clean = ResponseChange(text="I can't read that file.")
        return StageHookVerdict(
            HookPoint.STREAM_RESPONSE, "modify", "vet", "transform", response=clean
        )

    shell = start(Shell(TurnConfig(tools=TOOLS), {HookPoint.STREAM_RESPONSE: vet}, [streamed]))
    assert not shell.events(ToolInvocationProposed)  # nothing proposed from the old response
    (decided,) = shell.events(HookDecided)
    assert (decided.data.stage, decided.data.point) == ("STREAM_RESPONSE", "post")
    (ended,) = shell.events(TurnEnded)
    assert ended.data.status == "completed" and ended.data.reply == "I can't read that file."
    assert shell.state.chat.history[-1].text == "I can't read that file."
    assert shell.state.chat.history[-1].tool_calls == ()
    assert shell.replayed() == shell.state


def test_a_response_interceptor_can_add_a_tool_call_that_goes_through_approval() -> None:
    def add(_: HookSubject) -> StageHookVerdict:
        call = ToolUseBlock(id="h1", name="grep", input={"pattern": "x"})
        change = ResponseChange(text="Let me search.", tool_calls=[call])
        return StageHookVerdict(HookPoint.STREAM_RESPONSE, "modify", "add", response=change)

    hooks = {HookPoint.STREAM_RESPONSE: add}
    shell = Shell(TurnConfig(tools=TOOLS), hooks, [success("plain")], {"grep": "found"})
    start(shell)
    (proposed,) = shell.events(ToolInvocationProposed)
    assert proposed.data.tool == "grep" and proposed.data.call_id == "h1"


def test_a_tool_interceptor_changes_a_result_before_the_model_sees_it() -> None:
    tool_call = replace(success("", "tool_use"), tool_calls=(ToolCall("c0", "read_file", {}),))

    def redact(subject: HookSubject) -> StageHookVerdict:
        (call,) = subject.calls
        assert call.result == "password=hunter2"
        said = HookVerdict(
            call.invocation_id, "modify", "redact", "transform", output="password=***"
        )
        return StageHookVerdict(HookPoint.TOOL_RESULT, "modify", results=(said,))

    outputs = {"read_file": "password=hunter2"}
    shell = Shell(
        TurnConfig(tools=TOOLS),
        {HookPoint.TOOL_RESULT: redact},
        [tool_call, success("ok")],
        outputs,
    )
    start(shell)
    (decided,) = shell.events(HookDecided)
    assert (decided.data.stage, decided.data.point, decided.data.output) == (
        "TOOL_CALL",
        "post",
        "password=***",
    )
    second = shell.requests[1]
    assert [m.text for m in second.messages if m.role == "tool"] == ["password=***"]
    assert shell.replayed() == shell.state


def test_a_tool_interceptor_may_stop_the_turn_after_a_result() -> None:
    tool_call = replace(success("", "tool_use"), tool_calls=(ToolCall("c0", "read_file", {}),))

    def stop(subject: HookSubject) -> StageHookVerdict:
        said = HookVerdict(
            subject.calls[0].invocation_id, "abort_turn", "leak", "guard", "secret in output"
        )
        return StageHookVerdict(
            HookPoint.TOOL_RESULT,
            "abort_turn",
            "leak",
            "guard",
            "secret in output",
            results=(said,),
        )

    shell = start(
        Shell(TurnConfig(tools=TOOLS), {HookPoint.TOOL_RESULT: stop}, [tool_call, success()])
    )
    assert len(shell.requests) == 1
    (ended,) = shell.events(TurnEnded)
    assert ended.data.failure_class is FailureClass.POLICY_DENIED and "secret in output" in (
        ended.data.reason or ""
    )


def history(n_turns: int) -> SessionState:
    """A session with `n_turns` earlier turns (a message and a reply each)."""
    state = SessionState.of("s1")
    for n in range(1, n_turns + 1):
        shell = Shell(TurnConfig(), {}, [success(f"reply {n} " + "x" * 100)], state=state)
        shell.ids = Ids(f"t{n}")
        shell.run(Fact(accepted(n, f"message {n}")))
        state = shell.state
    return state


def test_a_compaction_interceptor_vetoes_and_the_turn_fails_saying_so() -> None:
    def keep(subject: HookSubject) -> StageHookVerdict:
        assert [m.text for m in subject.dropped][:1] == ["message 1"]
        return StageHookVerdict(
            HookPoint.COMPACT, "veto", "keep-all", "guard", reason="audit needs it all"
        )

    shell = Shell(TurnConfig(), {HookPoint.COMPACT: keep}, [TOO_LONG, success()], state=history(4))
    shell.run(Fact(accepted(9, "now")))
    assert not shell.events(ContextCompacted)
    (ended,) = shell.events(TurnEnded)
    assert ended.data.failure_class is FailureClass.PROVIDER_ERROR
    assert "vetoed" in (ended.data.reason or "") and "audit needs it all" in (
        ended.data.reason or ""
    )


def test_a_compaction_interceptor_chooses_what_is_dropped_and_summarises_it() -> None:
    def summarise(subject: HookSubject) -> StageHookVerdict:
        change = CompactionChange(dropped_messages=2, summary="The user said hello twice.")
        return StageHookVerdict(HookPoint.COMPACT, "modify", "sum", "transform", compaction=change)

    shell = Shell(
        TurnConfig(), {HookPoint.COMPACT: summarise}, [TOO_LONG, success("fine")], state=history(4)
    )
    shell.run(Fact(accepted(9, "now")))
    (compacted,) = shell.events(ContextCompacted)
    assert (
        compacted.data.dropped_messages == 2
        and compacted.data.summary == "The user said hello twice."
    )
    assert shell.state.chat.summary.endswith("The user said hello twice.")
    assert shell.state.chat.history[0].text == "message 2"
    assert shell.events(TurnEnded)[0].data.status == "completed"


def test_a_stop_hook_asks_for_one_more_round_within_max_iterations() -> None:
    def more(subject: HookSubject) -> StageHookVerdict:
        if "checked" in subject.text:
            return StageHookVerdict(HookPoint.STOP, "continue")
        return StageHookVerdict(
            HookPoint.STOP, "iterate", "verify", "guard", text="Check your answer."
        )

    shell = start(Shell(TurnConfig(), {HookPoint.STOP: more}, [success("42"), success("checked")]))
    assert len(shell.requests) == 2
    assert shell.requests[1].messages[-1].text == "Check your answer."
    pre = [
        e.data.iteration for e in shell.events(StagePreFired) if e.data.stage == "COMPOSE_REQUEST"
    ]
    assert pre == [1, 2]
    (ended,) = shell.events(TurnEnded)
    assert ended.data.status == "completed" and ended.data.reply == "42\n\nchecked"
    assert shell.replayed() == shell.state


def test_a_stop_hook_is_not_asked_past_max_iterations() -> None:
    def more(_: HookSubject) -> StageHookVerdict:
        return StageHookVerdict(HookPoint.STOP, "iterate", "loop", text="again")

    shell = start(
        Shell(
            TurnConfig(max_iterations=2),
            {HookPoint.STOP: more},
            [success("a"), success("b"), success("c")],
        )
    )
    assert len(shell.requests) == 2 and len(shell.seen[HookPoint.STOP]) == 1
    assert shell.events(TurnEnded)[0].data.status == "completed"


def test_an_answer_a_point_cannot_take_changes_nothing() -> None:
    def odd(_: HookSubject) -> StageHookVerdict:
        return StageHookVerdict(HookPoint.SEND_REQUEST, "veto", "odd")  # a veto is COMPACT's

    shell = start(Shell(TurnConfig(), {HookPoint.SEND_REQUEST: odd}, [success("hi")]))
    assert not shell.events(HookDecided)
    assert shell.events(TurnEnded)[0].data.status == "completed"


def test_with_no_hooks_a_turn_passes_its_points_without_a_stop() -> None:
    shell = start(Shell(TurnConfig(), {}, [success("hi")]))
    stages = [
        (e.type, getattr(e.data, "stage", "")) for e in unmerged(shell.log) if "Stage" in e.type
    ]
    assert stages == [
        (kind, stage)
        for stage in ("RECEIVE_INPUT", "COMPOSE_REQUEST", "SEND_REQUEST", "STREAM_RESPONSE")
        for kind in ("StagePreFired", "StagePostFired")
    ] + [("StagePreFired", "RENDER"), ("StagePostFired", "RENDER")]
    assert not shell.events(HookDecided)


def test_the_cli_line_of_a_hook_decision_says_where_and_what_changed() -> None:
    from turnstream.cli.render import summarize

    shell = start(
        Shell(
            TurnConfig(tools=TOOLS),
            {
                HookPoint.SEND_REQUEST: lambda _: StageHookVerdict(
                    HookPoint.SEND_REQUEST,
                    "modify",
                    "narrow",
                    "transform",
                    "cheaper",
                    request=RequestChange(model="small", tools=["grep"]),
                )
            },
            [success("hi")],
        )
    )
    (decided,) = shell.events(HookDecided)
    line = summarize(decided)
    assert line == "narrow (transform) at SEND_REQUEST → modify: model small, tools grep; cheaper"
