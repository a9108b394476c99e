"""Replies, send_message and sub-turns in the pure core: the session decider driven as the
runner drives it (inputs in, events and effects out), no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.factories import T0, Ids, accepted, interrupt
from turnstream.core.events import (
    Event,
    InputAccepted,
    InputAcceptedData,
    MessageDropped,
    MessageSent,
    ReplyOutcome,
    Sender,
    SessionConfigured,
    SessionConfiguredData,
    SessionTurnEnd,
    SessionTurnStart,
    SteeringInjected,
    SubTurnEnded,
    SubTurnResultDelivered,
    SubTurnSpawned,
    ToolCallApproved,
    ToolCallApprovedData,
    ToolInvocationFailed,
    ToolInvocationProposed,
    ToolInvocationSucceeded,
    TurnEnded,
    Usage,
)
from turnstream.core.immutable import with_changes
from turnstream.core.inputs import Fact, Tick
from turnstream.core.session import SessionState, fold
from turnstream.core.session.agent import with_agent
from turnstream.core.session.decider import (
    Deliver,
    Input,
    ProviderDone,
    Published,
    decide_session,
)
from turnstream.core.session.outbound import Outbound, reply_key
from turnstream.core.session.subturns import waiting_on
from turnstream.core.turn import Context, ProviderSuccess, ToolCall, TurnConfig
from turnstream.core.turn.runtime_calls import child_session_id


def ok(text: str = "", calls: tuple[ToolCall, ...] = ()) -> ProviderSuccess:
    return ProviderSuccess(
        text=text,
        stop_reason="tool_use" if calls else "end_turn",
        usage=Usage(input_tokens=1, output_tokens=1),
        first_byte_at=T0,
        finished_at=T0,
        tool_calls=calls,
    )


def spawn_call(n: int = 0, mode: str = "sync", **args: Any) -> ToolCall:
    return ToolCall(f"call{n}", "spawn", {"task": f"task {n}", "mode": mode, **args})


@dataclass
class Shell:
    """The runner's loop without NATS: decide, fold, answer effects as told."""

    state: SessionState
    config: TurnConfig = field(default_factory=TurnConfig)
    now: datetime = T0
    ids: Ids = field(default_factory=Ids)
    log: list[Event] = field(default_factory=list)
    outbox: list[Outbound] = field(default_factory=list)
    """What the last decision asked to deliver."""

    def feed(self, item: Input) -> list[Event]:
        ctx = Context(now=self.now, new_id=self.ids, source="test/1")
        decision = decide_session(self.state, item, self.config, ctx)
        if isinstance(item, Fact):
            self.log.append(item.event)
        self.state = decision.state
        assert fold(self.state, []) == self.state
        self.log += decision
        self.outbox = [m for e in decision.effects if isinstance(e, Deliver) for m in e.messages]
        return list(decision)

    def fact(self, event: Event) -> list[Event]:
        return self.feed(Fact(event))

    def publish(self) -> list[Event]:
        """Deliver what the state wants delivered (the shell's `Deliver`)."""
        keys = frozenset(m.key for m in self.outbox)
        return self.feed(Published(keys)) if keys else []

    def model(self, reply: ProviderSuccess) -> list[Event]:
        turn = self.state.chat.active
        assert turn is not None and turn.awaiting_provider
        return self.feed(ProviderDone(turn.turn_id, reply))

    def approve_all(self) -> None:
        turn = self.state.chat.active
        assert turn is not None
        for call in turn.calls:
            if call.status == "proposed":
                self.fact(approved(call.invocation_id, turn.turn_id, self.state.session_id))

    def of(self, cls: type) -> list[Any]:
        return [e for e in self.log if isinstance(e, cls)]


def approved(invocation_id: str, turn_id: str, session: str) -> ToolCallApproved:
    return ToolCallApproved(
        id=f"ok-{invocation_id}",
        time=T0,
        session_id=session,
        chat_id="c1",
        turn_id=turn_id,
        trace_id="t",
        correlation_id="k",
        source="approval/1",
        data=ToolCallApprovedData(invocation_id=invocation_id, authority="mode"),
    )


def reply_of(child: str, key: str, n: int, status: str = "completed", text: str = "done") -> Any:
    """The parent's gateway's record of a child's reply."""
    return InputAccepted(
        id=f"reply-{child}-{n}",
        time=T0,
        session_id="s1",
        chat_id="s1",
        turn_id=f"rt-{child}-{n}",
        trace_id="t",
        correlation_id=f"reply:{child}",
        source="gateway/1",
        data=InputAcceptedData(
            kind="message",
            text=text,
            sender=Sender(kind="agent", id=child),
            idempotency_key=f"reply:{child}",
            inbound_seq=100 + n,
            in_reply_to=key,
            hops=2,
            outcome=ReplyOutcome(
                turn_id=f"ct-{child}",
                status=status,  # type: ignore[arg-type]
                failure_class=None if status == "completed" else "provider_error",  # type: ignore[arg-type]
            ),
        ),
    )


def started(calls: tuple[ToolCall, ...], config: TurnConfig | None = None) -> Shell:
    """A turn of s1 whose model asked for `calls`, approved."""
    shell = Shell(fold(SessionState.of("s1"), [accepted(1)]), config or TurnConfig())
    shell.feed(Tick())
    shell.model(ok(calls=calls))
    shell.approve_all()
    return shell


# -- replies ----------------------------------------------------------------------------


def with_reply_to(hops: int = 0) -> InputAccepted:
    event = accepted(1)
    data = event.data.model_copy(update={"reply_to": "a1", "hops": hops})
    return event.model_copy(update={"data": data})


def test_a_turn_with_reply_to_delivers_its_reply_then_closes() -> None:
    shell = Shell(fold(SessionState.of("s1"), [with_reply_to()]))
    shell.feed(Tick())
    events = shell.model(ok("the answer"))
    assert isinstance(events[-1], TurnEnded)  # the turn waits for its reply to go out
    [message] = shell.outbox
    assert message.key == reply_key("turn1") and message.to == "a1"
    assert message.command["inReplyTo"] == "key1" and message.command["hops"] == 1
    assert message.command["text"] == "the answer" and "replyTo" not in message.command
    assert message.command["outcome"] == {"turnId": "turn1", "status": "completed"}
    recorded = shell.publish()
    assert [e.type for e in recorded] == ["MessageSent", "SessionTurnEnd"]
    assert shell.outbox == [] and shell.state.chat.active is None
    # a redelivered Published (a retry) records nothing again
    assert shell.feed(Published(frozenset({message.key}))) == []


def test_a_failed_turn_replies_with_its_failure_class() -> None:
    shell = Shell(fold(SessionState.of("s1"), [with_reply_to()]))
    shell.feed(Tick())
    shell.fact(interrupt("hard"))
    [message] = shell.outbox
    assert message.command["text"].startswith("turn failed (interrupted): hard interrupt")
    assert message.command["outcome"]["failureClass"] == "interrupted"


def test_a_message_wanting_a_reply_is_queued_not_steered() -> None:
    from turnstream.core.events import FollowUpQueued

    shell = Shell(fold(SessionState.of("s1"), [accepted(1)]), TurnConfig(followup_policy="steer"))
    shell.feed(Tick())
    second = with_reply_to().model_copy(update={"id": "in2", "turn_id": "turn2"})
    events = shell.fact(second)
    assert [type(e) for e in events] == [FollowUpQueued]


def test_past_the_hop_limit_the_reply_is_dropped() -> None:
    shell = Shell(fold(SessionState.of("s1"), [with_reply_to(hops=8)]))
    shell.feed(Tick())
    events = shell.model(ok("x"))
    assert [e.type for e in events[-3:]] == ["TurnEnded", "MessageDropped", "SessionTurnEnd"]
    assert shell.outbox == []
    assert shell.of(MessageDropped)[0].data.hops == 9


# -- send_message -----------------------------------------------------------------------


def test_send_message_is_delivered_then_answered() -> None:
    call = ToolCall("c1", "send_message", {"to": "s9", "text": "hi", "expectReply": True})
    shell = started((call,))
    [message] = shell.outbox
    assert message.command["replyTo"] == "s1" and message.command["hops"] == 1
    events = shell.publish()
    kinds = [e.type for e in events]
    assert kinds[:2] == ["MessageSent", "ToolInvocationSucceeded"]
    assert shell.of(MessageSent)[0].data.cause == "send_message"


def test_send_message_to_an_invalid_session_fails_the_call() -> None:
    call = ToolCall("c1", "send_message", {"to": "no spaces", "text": "hi"})
    shell = started((call,))
    assert shell.outbox == []
    [failed] = shell.of(ToolInvocationFailed)
    assert failed.data.error.kind == "invalid_arguments"


def test_send_message_past_the_hop_limit_is_dropped_and_fails() -> None:
    call = ToolCall("c1", "send_message", {"to": "s9", "text": "hi"})
    shell = started((call,), TurnConfig(max_hops=0))
    assert shell.outbox == []
    assert shell.of(MessageDropped)[0].data.cause == "send_message"
    assert shell.of(ToolInvocationFailed)[0].data.error.error_class == "limit_exceeded"


# -- sub-turns --------------------------------------------------------------------------


def test_a_sync_sub_turn_answers_its_call_once() -> None:
    shell = started((spawn_call(),))
    [message] = shell.outbox
    child = message.to
    assert child == child_session_id("s1", shell.of(ToolInvocationProposed)[0].data.invocation_id)
    assert message.command["parent"]["depth"] == 1 and message.command["replyTo"] == "s1"
    events = shell.publish()
    assert [e.type for e in events] == ["SubTurnSpawned", "MessageSent"]  # the turn waits
    key = message.key
    events = shell.fact(reply_of(child, key, 1, text="found it"))
    assert [e.type for e in events[:3]] == [
        "SubTurnEnded",
        "ToolInvocationSucceeded",
        "SubTurnResultDelivered",
    ]
    assert shell.of(ToolInvocationSucceeded)[0].data.output == "found it"
    assert shell.state.chat.active is not None and shell.state.chat.active.awaiting_provider
    # a duplicate reply changes nothing and starts no turn
    assert shell.fact(reply_of(child, key, 2)) == []
    shell.model(ok("done"))
    assert len(shell.of(TurnEnded)) == 1 and shell.state.chat.pending == ()


def test_a_child_answering_before_its_spawn_is_recorded_still_answers_the_call() -> None:
    for mode in ("sync", "async"):
        shell = started((spawn_call(mode=mode),))
        [message] = shell.outbox
        # the child ran and replied between the publish and the parent's record of it
        assert shell.fact(reply_of(message.to, message.key, 1, text="quick")) == []
        assert shell.state.chat.pending == () and shell.state.early
        events = shell.publish()
        kinds = [e.type for e in events]
        assert kinds[:2] == ["SubTurnSpawned", "MessageSent"] and "SubTurnEnded" in kinds
        assert len(shell.of(SubTurnResultDelivered)) == 1 and shell.state.early == ()
        if mode == "sync":
            assert shell.of(ToolInvocationSucceeded)[0].data.output == "quick"
        _assert_at_most_once(shell)


def test_an_async_sub_turn_steers_a_running_turn_or_follows_up() -> None:
    shell = started((spawn_call(mode="async"), spawn_call(1, mode="async")))
    keys = [m.key for m in shell.outbox]
    assert len(keys) == 2  # consecutive spawns go out together
    events = shell.publish()
    assert [e.type for e in events].count("ToolInvocationSucceeded") == 2
    children = [e.data.child_session_id for e in shell.of(SubTurnSpawned)]
    # the first child ends while the parent still runs: steered in
    shell.fact(reply_of(children[0], keys[0], 1, text="first"))
    assert shell.of(SteeringInjected)[0].data.text.endswith("first")
    shell.model(ok("parent done"))
    assert shell.state.chat.active is None
    # the second ends after: a follow-up turn
    events = shell.fact(reply_of(children[1], keys[1], 1, text="second"))
    delivered = [e.data.delivered_as for e in shell.of(SubTurnResultDelivered)]
    assert delivered == ["steering", "follow_up"]
    assert shell.state.chat.active is not None and "second" in shell.state.chat.history[-1].text


def test_a_child_past_its_deadline_ends_timeout_and_a_late_reply_is_ignored() -> None:
    shell = started((spawn_call(),), TurnConfig(subturn_deadline_s=60))
    [message] = shell.outbox
    shell.publish()
    shell.now = T0 + timedelta(seconds=61)
    shell.feed(Tick())
    [ended] = shell.of(SubTurnEnded)
    assert ended.data.failure_class == "timeout"
    assert shell.of(ToolInvocationFailed)[0].data.error.kind == "timeout"
    assert shell.fact(reply_of(message.to, message.key, 1)) == []
    assert len(shell.of(SubTurnResultDelivered)) == 1


def test_spawn_limits_fail_the_call_with_limit_exceeded() -> None:
    deep = Shell(fold(SessionState.of("s1"), [accepted(1)]), TurnConfig(max_subturn_depth=0))
    deep.feed(Tick())
    deep.model(ok(calls=(spawn_call(),)))
    deep.approve_all()
    [failed] = deep.of(ToolInvocationFailed)
    assert failed.data.error.error_class == "limit_exceeded"
    assert failed.data.error.kind == "depth_limit"
    many = started(tuple(spawn_call(i, mode="async") for i in range(3)), TurnConfig(max_subturns=2))
    many.publish()
    many.publish()
    kinds = [f.data.error.kind for f in many.of(ToolInvocationFailed)]
    assert kinds == ["subturn_limit"] and len(many.of(SubTurnSpawned)) == 2


def test_a_tree_of_sub_turns_stays_within_its_root_budget() -> None:
    config = TurnConfig(max_subturns_per_root=7, max_subturns=3)
    shell = started(tuple(spawn_call(i, mode="async") for i in range(4)), config)
    budgets = [m.command["parent"]["budget"] for m in shell.outbox]
    assert budgets == [2, 1, 0]  # each child costs itself and its share of what is left
    assert [f.data.error.kind for f in shell.of(ToolInvocationFailed)] == ["subturn_limit"]
    shell.publish()
    assert [e.data.budget for e in shell.of(SubTurnSpawned)] == [2, 1, 0]
    small = TurnConfig(max_subturns_per_root=4, max_subturns=5)
    shell = started(tuple(spawn_call(i, mode="async") for i in range(5)), small)
    assert len(shell.outbox) == 4
    assert [f.data.error.kind for f in shell.of(ToolInvocationFailed)] == ["tree_limit"]


def test_spawn_without_a_task_or_with_an_unknown_agent_fails() -> None:
    config = TurnConfig(agents=frozenset({"researcher"}))
    shell = started((ToolCall("c1", "spawn", {"agent": "researcher"}),), config)
    assert "task" in shell.of(ToolInvocationFailed)[0].data.error.detail
    shell = started((spawn_call(agent="nobody"),), config)
    assert "no agent 'nobody'" in shell.of(ToolInvocationFailed)[0].data.error.detail


def test_a_hard_interrupt_cascades_to_running_children() -> None:
    shell = started((spawn_call(),))
    child_key = shell.outbox[0].key
    child = shell.outbox[0].to
    shell.publish()
    shell.fact(interrupt("hard"))
    [message] = shell.outbox
    assert message.command == {
        "type": "interrupt",
        "sessionId": child,
        "chatId": child,
        "sender": {"kind": "agent", "id": "s1"},
        "idempotencyKey": message.key,
        "mode": "hard",
    }
    shell.publish()
    assert shell.outbox == [] and shell.of(MessageSent)[-1].data.kind == "interrupt"
    # the child's interrupted reply comes after the parent's turn ended: nobody waits for it
    shell.fact(reply_of(child, child_key, 1, status="failed"))
    assert [e.data.delivered_as for e in shell.of(SubTurnResultDelivered)] == ["dropped"]
    assert shell.state.chat.active is None and shell.state.chat.pending == ()


def test_a_child_published_just_before_an_interrupt_is_recorded_and_interrupted() -> None:
    shell = started((spawn_call(mode="async"),))
    [message] = shell.outbox
    shell.fact(interrupt("hard"))  # folded (a reload) between the publish and its record
    assert shell.state.chat.active is None  # the turn ended at once
    shell.state = fold(SessionState.of("s1"), shell.log[: _index_after_interrupt(shell)])
    events = shell.feed(Published(frozenset({message.key})))
    kinds = [e.type for e in events]
    assert kinds[:3] == ["SubTurnSpawned", "MessageSent", "ToolInvocationSucceeded"]
    assert kinds[-2:] == ["TurnEnded", "SessionTurnEnd"]  # then the interrupt ends the turn
    _assert_at_most_once(shell)
    [child] = shell.state.children
    assert child.interrupt == "hard"
    assert [m.kind for m in shell.outbox] == ["interrupt"]


def _index_after_interrupt(shell: Shell) -> int:
    """The log up to the interrupt: what a reload finds when the interrupt's append made the
    runner's next append conflict (the turn's end is not decided yet)."""
    return next(i for i, e in enumerate(shell.log) if e.type == "InterruptReceived") + 1


def test_tool_hooks_see_runtime_calls_before_they_run() -> None:
    from turnstream.core.session.decider import RunToolHooks, ToolHooksSaid
    from turnstream.core.turn import HookVerdict

    for action, sent in (("continue", True), ("deny_tool", False)):
        shell = started((spawn_call(),), TurnConfig(tool_hooks=True))
        assert shell.outbox == []  # the hooks first
        turn = shell.state.chat.active
        assert turn is not None
        decision = decide_session(shell.state, Tick(), shell.config, Context(T0, shell.ids, "t/1"))
        [hooks] = [e for e in decision.effects if isinstance(e, RunToolHooks)]
        [call] = hooks.calls
        assert call.tool == "spawn"
        verdict = HookVerdict(call.invocation_id, action)  # type: ignore[arg-type]
        shell.feed(ToolHooksSaid(turn.turn_id, (verdict,)))
        assert bool(shell.outbox) is sent
        assert not any(e.type == "ToolInvocationRequested" for e in shell.log)
        if not sent:  # the model hears of the denial, like any tool's
            assert shell.state.chat.history[-1].text.startswith("policy_denied (hook")


def test_an_agent_profile_shapes_the_turn_config() -> None:
    agent = SessionConfiguredData(
        agent="r", tools=["read_file", "spawn"], max_iterations=3, idempotency_key="k"
    )
    config = with_agent(TurnConfig(), agent)
    assert [t.name for t in config.tools] == ["spawn"]  # only registered tools pass
    assert config.max_iterations == 3 and config.agent == "r"
    event = SessionConfigured(
        id="sc",
        time=T0,
        session_id="s1",
        chat_id="c1",
        trace_id="t",
        correlation_id="k",
        source="gateway/1",
        data=agent,
    )
    state = fold(SessionState.of("s1"), [event, event.model_copy(update={"id": "sc2"})])
    assert state.agent == agent


# -- properties -------------------------------------------------------------------------

Step = tuple[str, int]
steps = st.lists(
    st.one_of(
        st.tuples(st.just("reply"), st.integers(0, 2)),
        st.tuples(st.just("dup"), st.integers(0, 2)),
        st.tuples(st.just("fail"), st.integers(0, 2)),
        st.tuples(st.just("tick"), st.integers(0, 400)),
        st.tuples(st.just("interrupt"), st.integers(0, 1)),
        st.tuples(st.just("model"), st.integers(0, 0)),
        st.tuples(st.just("publish"), st.integers(0, 0)),
        st.tuples(st.just("early"), st.integers(0, 2)),
    ),
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(
    modes=st.lists(st.sampled_from(["sync", "async"]), min_size=1, max_size=3),
    script=steps,
)
def test_no_sequence_delivers_twice_or_leaves_the_parent_waiting(
    modes: list[str], script: list[Step]
) -> None:
    shell = started(tuple(spawn_call(i, mode=m) for i, m in enumerate(modes)))
    spawned: dict[int, Outbound] = {}
    n = 0

    def going_out() -> None:  # the shell publishes the children's inputs: they exist
        for message in shell.outbox:
            if message.kind == "message" and message.cause == "subturn":
                if message.key not in {m.key for m in spawned.values()}:
                    spawned[len(spawned)] = message

    for kind, arg in script:
        n += 1
        if kind == "early" and shell.outbox:  # a child answers before its record
            going_out()
            keys = frozenset(m.key for m in shell.outbox)
            if arg in spawned and spawned[arg].key in keys:
                shell.fact(reply_of(spawned[arg].to, spawned[arg].key, n))
            shell.feed(Published(keys))
        elif kind in ("reply", "dup", "fail") and arg in spawned:
            m = spawned[arg]
            status = "failed" if kind == "fail" else "completed"
            shell.fact(reply_of(m.to, m.key, n, status=status))
        elif kind == "tick":
            shell.now = max(shell.now, T0 + timedelta(seconds=arg))
            shell.feed(Tick())
        elif kind == "interrupt":
            shell.fact(interrupt("hard" if arg else "graceful", n))
        elif kind == "model":
            turn = shell.state.chat.active
            if turn is not None and turn.awaiting_provider:
                shell.model(ok("text"))
        elif kind == "publish":
            going_out()
            shell.publish()
    _assert_at_most_once(shell)
    # drain: deliver everything, let every deadline pass, answer every model call
    for _ in range(30):
        shell.now += timedelta(seconds=400)
        going_out()
        shell.publish()
        shell.feed(Tick())
        turn = shell.state.chat.active
        if turn is not None and turn.awaiting_provider:
            shell.model(ok("text"))
        elif shell.state.chat.active is None and not shell.outbox and not waiting_on(shell.state):
            break
    _assert_at_most_once(shell)
    spawned_ids = {e.data.invocation_id for e in shell.of(SubTurnSpawned)}
    assert spawned_ids == {e.data.invocation_id for e in shell.of(SubTurnEnded)}
    assert spawned_ids == {e.data.invocation_id for e in shell.of(SubTurnResultDelivered)}
    assert shell.state.chat.active is None, "the parent is stuck"
    assert all(c.status == "delivered" for c in shell.state.children)
    assert len(shell.of(SessionTurnEnd)) == len(shell.of(TurnEnded))
    # a child's reply is its result: a turn of the parent only as an async follow-up
    follow_ups = {
        d.data.input_id
        for d in shell.of(SubTurnResultDelivered)
        if d.data.delivered_as == "follow_up"
    }
    for start in shell.of(SessionTurnStart):
        assert not start.data.input_id.startswith("reply-") or start.data.input_id in follow_ups


def _assert_at_most_once(shell: Shell) -> None:
    for cls in (SubTurnSpawned, SubTurnEnded, SubTurnResultDelivered):
        ids = [e.data.invocation_id for e in shell.of(cls)]
        assert len(ids) == len(set(ids)), f"two {cls.__name__} for one child"
    results = [
        e.data.invocation_id
        for e in shell.log
        if isinstance(e, ToolInvocationSucceeded | ToolInvocationFailed)
    ]
    assert len(results) == len(set(results)), "a call answered twice"


def test_a_state_with_agents_children_and_replies_round_trips_as_a_snapshot() -> None:
    from turnstream.core.session import state_from_json, state_to_json

    shell = started((spawn_call(mode="async"), spawn_call(1)))
    agent = SessionConfiguredData(agent="r", tools=["spawn"], idempotency_key="k")
    shell.state = with_changes(shell.state, agent=agent)
    shell.publish()
    [first, _] = [e.data for e in shell.of(SubTurnSpawned)]
    shell.fact(reply_of(first.child_session_id, first.idempotency_key, 1))
    assert shell.state.children and shell.state.agent is not None
    assert state_from_json(state_to_json(shell.state)) == shell.state


def test_the_state_json_keeps_the_chat_s_fields_at_the_top_as_snapshots_had_them() -> None:
    """The session holds its chat as a part; its JSON (snapshots, `status --json`) is flat
    as before, so a snapshot written before loads to the same state."""
    import orjson

    from turnstream.core.session import state_from_json, state_to_json

    shell = started((spawn_call(mode="async"),))
    shell.publish()
    body = orjson.loads(state_to_json(shell.state))
    assert list(body) == [
        "session_id",
        "pending",
        "active",
        "history",
        "attachments",
        "provider_calls",
        "turns_ended",
        "last_turn_id",
        "last_status",
        "spent",
        "children",
        "early",
        "summary",
        "workflow",
        "agent",
        "security_mode",
        "unanswered",
        "stage_spent",
    ]
    assert body["children"] and body["active"]["turn_id"] == shell.state.chat.active.turn_id
    assert state_from_json(orjson.dumps(body)) == shell.state


@settings(max_examples=150, deadline=None)
@given(
    hops=st.integers(0, 9),
    script=st.lists(
        st.sampled_from(["model", "publish", "publish_stale", "tick", "hard", "graceful"]),
        max_size=12,
    ),
)
def test_a_reply_is_recorded_once_whatever_comes_in_between(hops: int, script: list[str]) -> None:
    shell = Shell(fold(SessionState.of("s1"), [with_reply_to(hops=hops)]))
    shell.feed(Tick())
    stale: frozenset[str] = frozenset()
    for n, step in enumerate(script):
        turn = shell.state.chat.active
        if step == "model" and turn is not None and turn.awaiting_provider:
            shell.model(ok("an answer"))
        elif step == "publish":
            stale = frozenset(m.key for m in shell.outbox) or stale
            shell.publish()
        elif step == "publish_stale" and stale:
            shell.feed(Published(stale))  # a retry of a publish already recorded
        elif step == "tick":
            shell.feed(Tick())
        elif step in ("hard", "graceful"):
            shell.fact(interrupt(step, n))
    for _ in range(5):  # drain: answer the model, deliver what is wanted
        turn = shell.state.chat.active
        if turn is not None and turn.awaiting_provider:
            shell.model(ok("an answer"))
        shell.publish()
    replies = [e for e in shell.log if isinstance(e, MessageSent | MessageDropped)]
    assert len(replies) == 1
    assert isinstance(replies[0], MessageDropped) is (hops + 1 > 8)
    assert shell.state.chat.active is None and len(shell.of(SessionTurnEnd)) == 1
    assert shell.outbox == []


# -- refused by the server (the turn-runner's NATS user may not publish there) ------------


def refuse_all(shell: Shell) -> list[Event]:
    """The shell's `Deliver`, every message refused by the server."""
    refused = tuple((m.key, f"may not publish to ts.in.{m.to}") for m in shell.outbox)
    return shell.feed(Published(frozenset(), refused))


def test_a_refused_reply_is_dropped_and_the_turn_closes() -> None:
    shell = Shell(fold(SessionState.of("s1"), [with_reply_to()]))
    shell.feed(Tick())
    shell.model(ok("the answer"))
    events = refuse_all(shell)
    assert [e.type for e in events] == ["MessageDropped", "SessionTurnEnd"]
    dropped = shell.of(MessageDropped)[0].data
    assert dropped.reason == "refused" and dropped.detail == "may not publish to ts.in.a1"
    assert shell.outbox == [] and shell.state.chat.active is None


def test_a_refused_send_message_or_spawn_fails_its_call() -> None:
    send = ToolCall("c1", "send_message", {"to": "s9", "text": "hi"})
    for call in (send, spawn_call()):
        shell = started((call,))
        events = refuse_all(shell)
        assert [e.type for e in events[:2]] == ["MessageDropped", "ToolInvocationFailed"]
        error = shell.of(ToolInvocationFailed)[0].data.error
        assert (error.error_class, error.kind) == ("policy_denied", "refused")
        assert shell.outbox == [] and not shell.of(SubTurnSpawned)
        assert shell.state.children == ()


def test_a_refused_interrupt_is_not_asked_again() -> None:
    shell = started((spawn_call(),))
    shell.publish()
    shell.fact(interrupt("hard"))
    assert [m.kind for m in shell.outbox] == ["interrupt"]
    events = refuse_all(shell)
    assert [(e.type, e.data.reason) for e in events if isinstance(e, MessageDropped)] == [
        ("MessageDropped", "refused")
    ]
    assert shell.outbox == []
