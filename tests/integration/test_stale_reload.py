"""A session actor's reload never goes back behind what it knew (issue 26's lost turns).

At R3 any replica answers a direct get, and one that has not applied the latest appends
answers with less. The elastic test once lost two turns so: a runner handling a tool
result reloaded the session (its lease taken again at the append, or the append refused
by a later event), the read came from a replica without the result, the state it built
waited for the result still, nothing was decided, and the result was acked as folded.
Here the replica is `BehindReplica` (the store's direct reads drop the last appends) and
the runner's session actor is driven the way its mailbox would; the result must be
decided (the model called with it) before it is acked. The same holds when the leader
asked for the session's last sequence was paused and answers from its old store
(`PausedLeader`). A runner taking a session over must see its previous holder's last
appends, and the approval service's deadline must not pass over an answer a replica
has not applied yet.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import replace
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from tests.integration.test_direct_read import BehindReplica
from tests.unit.factories import T0, Ids, accepted, succeed, success
from turnstream.bus import Bus
from turnstream.bus.leases import Ownership
from turnstream.bus.store import JetStreamEventStore
from turnstream.core.approval import ApprovalConfig
from turnstream.core.events import Event, ToolInvocationRequested, ToolInvocationStarted
from turnstream.core.inputs import Tick
from turnstream.core.session.decider import ProviderDone
from turnstream.core.turn import ToolCall, ToolInfo, TurnConfig
from turnstream.hooks import HookRegistry
from turnstream.runtime.mailbox import Delivered
from turnstream.turn_runner.context import ActorContext
from turnstream.turn_runner.session import SessionActor

TOOLS = (ToolInfo("write_file", "write", {"type": "object"}, False, False, 7.0),)
CONFIG = TurnConfig(tools=TOOLS, approval=ApprovalConfig("auto"))


class Msg:
    """A delivered message: what the actor did with it."""

    def __init__(self) -> None:
        self.metadata = SimpleNamespace(num_delivered=1)
        self.settled: str | None = None

    async def ack(self) -> None:
        self.settled = "ack"

    async def nak(self, delay: float = 0) -> None:
        self.settled = "nak"


class Lease:
    """This runner's lease on the session: `ensure` answers `answers` in turn, then KEPT;
    until they are all given, `holds` says no (the runner checks before it appends)."""

    owner, retry_s = "runner-test", 0.2

    def __init__(self, *answers: Ownership) -> None:
        self.ensured = list(answers)

    def lapse(self) -> None:
        """Held at `handle` still, lapsed at the append (the runner too busy to renew it),
        and taken again then (NEW: the actor reloads)."""
        self.ensured = [Ownership.KEPT, Ownership.NEW]

    def holds(self, session_id: str) -> bool:
        return not self.ensured

    async def ensure(self, session_id: str) -> Ownership:
        return self.ensured.pop(0) if self.ensured else Ownership.KEPT

    async def confirm(self, session_id: str) -> bool:
        return True


class NoSnapshots:
    async def get(self, key: str) -> Any:
        raise KeyError(key)

    async def put(self, key: str, value: bytes) -> None:
        pass


async def waiting_forever(*_: Any) -> Any:
    await asyncio.Event().wait()


def actor_over(
    bus: Bus, store: JetStreamEventStore, lease: Lease, session: str, name: str = "runner"
) -> SessionActor:
    ticks = itertools.count()
    provider = SimpleNamespace(name="test", complete=waiting_forever)
    loop = asyncio.get_running_loop()
    ctx = ActorContext(
        store=store,
        leases=lease,
        snapshots=lambda: asyncio.sleep(0, NoSnapshots()),
        now=lambda: T0 + timedelta(milliseconds=next(ticks)),
        new_id=Ids(f"{session}-{name}-"),
        source="turn-runner/test",
        session=lambda _: (provider, CONFIG),  # type: ignore[arg-type,return-value]
        agent_provider=lambda _: None,
        publish_inbound=waiting_forever,
        hooks=HookRegistry(nc=bus.nc),
        deliver=lambda *_: None,
        deliver_later=lambda *_: loop.call_later(3600, lambda: None),
        spawn=lambda work, name: loop.create_task(work, name=name),
        observe=lambda _: None,
        publish_live=waiting_forever,
        reloaded=lambda _: None,
    )
    return SessionActor(ctx, session)


async def deliver(bus: Bus, actor: SessionActor, event: Event) -> tuple[int, Msg]:
    """Append `event` (another service's fact) and hand it to the actor as delivered."""
    [seq] = await bus.store.append_facts([event])
    msg = Msg()
    await actor.handle(Delivered(msg, seq, event))
    return seq, msg


async def kinds_after(bus: Bus, session: str, seq: int) -> list[str]:
    return [s.event.type for s in await bus.store.read_session(session) if s.seq > seq]


class PausedLeader:
    """The connection, but the last message of `subject` is answered as of `upto`: a
    leader paused (a stop, a long GC) answers from its store until it hears it is not the
    leader any more."""

    def __init__(self, nc: Any, subject: str, upto: int) -> None:
        self.nc, self.subject, self.upto = nc, subject, upto
        self.asked = 0

    async def request(self, subject: str, payload: bytes, **how: Any) -> Any:
        reply = await self.nc.request(subject, payload, **how)
        asked = subject.startswith("$JS.API.STREAM.MSG.GET.") and orjson.loads(payload)
        if not asked or asked.get("last_by_subj") != self.subject:
            return reply
        self.asked += 1
        answer = orjson.loads(reply.data)
        answer["message"]["seq"] = self.upto
        return SimpleNamespace(data=orjson.dumps(answer))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.nc, name)


@pytest.mark.parametrize(
    "why", ["lease taken again", "append refused", "a paused leader answers too"]
)
async def test_a_tool_result_is_decided_though_a_replica_behind_it_answers_the_reload(
    bus: Bus, why: str
) -> None:
    session = f"stale-{why.replace(' ', '-')}"
    store = JetStreamEventStore(bus.nc, bus.js, bus.subjects)
    lease = Lease()
    actor = actor_over(bus, store, lease, session)
    try:
        # a turn to its tool call: the input, then the model's answer (auto: requested)
        given = accepted(1, "go", session=session).model_copy(update={"id": f"{session}-in"})
        await deliver(bus, actor, given)
        turn = actor.state.chat.active
        assert turn is not None
        call = ToolCall("c1", "write_file", {"path": "a"})
        await actor.handle(
            ProviderDone(turn.turn_id, replace(success("", "tool_use"), tool_calls=(call,)))
        )
        [requested] = [
            s.event
            for s in await bus.store.read_session(session)
            if isinstance(s.event, ToolInvocationRequested)
        ]
        invocation = requested.data.invocation_id
        result = succeed(invocation, turn=turn.turn_id).model_copy(
            update={"session_id": session, "id": f"{session}-result"}
        )

        if why != "append refused":
            # the lease looks lapsed at the append; taken again, the actor reloads, and
            # the replica answering has not applied the result yet (nor, if paused, the
            # leader asked for the session's last sequence)
            lease.lapse()
            store.direct = BehindReplica(store.direct, behind=1)  # type: ignore[assignment]
            paused = PausedLeader(bus.nc, bus.subjects.log_session(session), actor.last_seq)
            if why == "a paused leader answers too":
                store.nc = paused
            seq, msg = await deliver(bus, actor, result)
            assert paused.asked == (why == "a paused leader answers too")
        else:
            # the append is refused: an event the runner does not consume (a verdict, a
            # start) landed after the result; the replica answering the reload has neither
            [seq] = await bus.store.append_facts([result])
            started = ToolInvocationStarted.model_validate(
                {
                    **requested.model_dump(mode="json", by_alias=True),
                    "id": f"{session}-started",
                    "type": "ToolInvocationStarted",
                    "source": "tool-executor/test",
                    "data": {"invocationId": "another"},
                }
            )
            await bus.store.append_facts([started])
            store.direct = BehindReplica(store.direct, behind=2)  # type: ignore[assignment]
            msg = Msg()
            await actor.handle(Delivered(msg, seq, result))

        after = await kinds_after(bus, session, seq)
        assert msg.settled == "ack" and not lease.ensured
        assert "ProviderRequestStarted" in after, f"the result was acked undecided: {after}"
    finally:
        for task in actor.model_calls.tasks.values():
            task.cancel()


async def test_a_prompt_answered_before_its_deadline_is_not_timed_out_on_a_replica_behind(
    bus: Bus,
) -> None:
    """The approval service's deadline wake-up reads the session up to the log's last event:
    a replica that has not applied the answer yet would have it deny the call as timed out
    (appended as it is: an approval decision has no append condition)."""
    from tests.unit.test_runner_approval import Leases, Runner, config
    from turnstream.approval.app import ApprovalActor, ApprovalService
    from turnstream.core.events import (
        InteractionAnswered,
        InteractionAnsweredData,
        InteractionRequested,
        Sender,
        ToolCallModeInvoked,
    )
    from turnstream.core.inputs import Tick

    session = "stale-approval"
    batch = Runner(config("ask")).model_calls(("write_file", {"path": "a"}))
    batch = [
        e.model_copy(update={"session_id": session, "id": f"{session}-{i}"})
        for i, e in enumerate(batch)
    ]
    await bus.store.append_facts(batch)
    store = JetStreamEventStore(bus.nc, bus.js, bus.subjects)
    clock = [T0]
    on = SimpleNamespace(store=store, js=bus.js, subjects=bus.subjects)
    service = ApprovalService(on, ApprovalConfig("ask"), clock=lambda: clock[0])  # type: ignore[arg-type]
    service.leases = Leases()  # type: ignore[assignment]
    actor = ApprovalActor(service, session)
    try:
        [invoked] = [e for e in batch if isinstance(e, ToolCallModeInvoked)]
        seq = next(s.seq for s in await bus.store.read_session(session) if s.event.id == invoked.id)
        await actor.handle(Delivered(Msg(), seq, invoked))  # the prompt, with its deadline
        [asked] = [
            s.event
            for s in await bus.store.read_session(session)
            if isinstance(s.event, InteractionRequested)
        ]
        answer = InteractionAnswered(
            id=f"{session}-answer",
            time=T0,
            session_id=session,
            chat_id=asked.chat_id,
            trace_id="tr",
            correlation_id="k",
            source="gateway/1",
            data=InteractionAnsweredData(
                interaction_id=asked.data.interaction_id,
                decision="approve",
                sender=Sender(kind="human", id="u1"),
                idempotency_key=f"{session}-answer",
                inbound_seq=1,
            ),
        )
        await bus.store.append_facts([answer])  # answered; not delivered to the actor yet
        clock[0] = asked.data.deadline + timedelta(seconds=1)
        store.direct = BehindReplica(store.direct, behind=1)  # type: ignore[assignment]
        await actor.handle(Tick())  # the deadline's wake-up
        verdicts = [
            s.event.type
            for s in await bus.store.read_session(session)
            if s.event.type in ("ToolCallApproved", "ToolCallDenied") and s.seq > seq
        ]
        assert verdicts == ["ToolCallApproved"]
    finally:
        if actor.timer is not None:
            actor.timer.cancel()


async def test_a_runner_taking_a_session_over_reads_its_previous_holder_s_last_appends(
    bus: Bus,
) -> None:
    """Runner A ends a turn and stops; runner B takes the session over (a wake-up, NEW)
    while the replica answering B has not applied A's last appends. B must not rebuild a
    state where the turn is still on: the next input, whose sequence B's appends are then
    conditional on, would pass the fence as a follow-up of a turn that is over."""
    session = "stale-take-over"
    a = actor_over(bus, JetStreamEventStore(bus.nc, bus.js, bus.subjects), Lease(), session)
    store = JetStreamEventStore(bus.nc, bus.js, bus.subjects)
    b = actor_over(bus, store, Lease(Ownership.NEW), session, "b")
    try:
        first = accepted(1, "one", session=session).model_copy(update={"id": f"{session}-1"})
        await deliver(bus, a, first)
        turn = a.state.chat.active
        assert turn is not None
        before = a.last_seq
        await a.handle(ProviderDone(turn.turn_id, success("done")))
        assert a.state.chat.active is None and a.last_seq > before  # A ended the turn

        store.direct = BehindReplica(store.direct, behind=a.last_seq - before)  # type: ignore[assignment]
        await b.handle(Tick())  # B takes the session over
        second = accepted(2, "two", session=session).model_copy(update={"id": f"{session}-2"})
        seq, msg = await deliver(bus, b, second)
        after = await kinds_after(bus, session, seq)
        assert msg.settled == "ack"
        assert "FollowUpQueued" not in after and "SessionTurnStart" in after, after
        ended = [s for s in await bus.store.read_session(session) if s.event.type == "TurnEnded"]
        assert len(ended) == 1
    finally:
        for actor in (a, b):
            for task in actor.model_calls.tasks.values():
                task.cancel()
