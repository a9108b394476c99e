"""The model call starts beside the append of its `ProviderRequestStarted` (issue 41): the
turn does not wait a round trip before the call, and nothing of the call reaches the
session's inbox or live subject before that append is stored; refused, the call is
cancelled and what it returned is never decided. A call that answers within the grace
has its outcome decided at once, and both decisions go out in one append."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

from tests.unit.factories import T0, Ids, accepted, success
from turnstream.bus.contract import AppendConflict
from turnstream.bus.leases import Ownership
from turnstream.bus.memory import InMemoryEventStore
from turnstream.core.events import EventBase
from turnstream.core.session.decider import ProviderDone
from turnstream.core.turn import ProviderRequest, TurnConfig
from turnstream.hooks import HookRegistry
from turnstream.runtime.mailbox import Delivered
from turnstream.turn_runner.context import ActorContext
from turnstream.turn_runner.session import SessionActor

GUARD_S = 10.0
"""Only a broken change waits this long (then the test fails): no timing is asserted."""


class Lease:
    owner, retry_s = "runner-test", 0.2

    def holds(self, session_id: str) -> bool:
        return True

    async def ensure(self, session_id: str) -> Ownership:
        return Ownership.KEPT

    async def confirm(self, session_id: str) -> bool:
        return True


class GatedStore(InMemoryEventStore):
    """A log whose decision appends wait for `gate`; the first is refused if `conflict`."""

    def __init__(self, conflict: bool = False) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.conflict = conflict
        self.batches: list[list[str]] = []

    async def append_decision(
        self, session_id: str, events: Sequence[EventBase], *, expected_last_seq: int
    ) -> int:
        await self.gate.wait()
        self.batches.append([e.type for e in events])
        if self.conflict:
            self.conflict = False
            raise AppendConflict(session_id, expected_last_seq, "another writer")
        return await super().append_decision(
            session_id, events, expected_last_seq=expected_last_seq
        )

    def kinds(self) -> list[str]:
        return [s.event.type for s in self.log]


class Model:
    """Answers each call at once (as the scripted provider does), numbering its replies;
    a slow one waits for `release` after its first token."""

    def __init__(self, slow: bool = False) -> None:
        self.name = "test"
        self.calls = 0
        self.called = asyncio.Event()
        self.cancelled = 0
        self.release = asyncio.Event()
        if not slow:
            self.release.set()

    async def complete(self, request: ProviderRequest, on_delta: Any, on_tool_call: Any) -> Any:
        self.calls += 1
        n = self.calls
        self.called.set()
        try:
            await on_delta(f"token of call {n}")
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return success(f"reply of call {n}")


class Inbox:
    def __init__(self) -> None:
        self.items: list[Any] = []
        self.live: list[bytes] = []

    def deliver(self, session_id: str, item: Any) -> None:
        self.items.append(item)

    async def publish_live(self, session_id: str, turn_id: str, payload: bytes) -> None:
        self.live.append(payload)


def actor_over(store: GatedStore, model: Model, inbox: Inbox) -> SessionActor:
    loop = asyncio.get_running_loop()
    ticks = itertools.count()

    async def never(*_: Any) -> Any:
        await asyncio.Event().wait()

    async def no_snapshot(key: str) -> Any:
        raise KeyError(key)

    ctx = ActorContext(
        store=store,  # type: ignore[arg-type]
        leases=Lease(),  # type: ignore[arg-type]
        snapshots=lambda: asyncio.sleep(0, SimpleNamespace(get=no_snapshot, put=never)),
        now=lambda: T0 + timedelta(milliseconds=next(ticks)),
        new_id=Ids("e-"),
        source="turn-runner/test",
        session=lambda _: (model, TurnConfig()),  # type: ignore[arg-type,return-value]
        agent_provider=lambda _: None,
        publish_inbound=never,
        hooks=HookRegistry(nc=None),  # type: ignore[arg-type]
        deliver=inbox.deliver,
        deliver_later=lambda *_: loop.call_later(3600, lambda: None),
        spawn=lambda work, name: loop.create_task(work, name=name),
        observe=lambda _: None,
        publish_live=inbox.publish_live,
        reloaded=lambda _: None,
    )
    return SessionActor(ctx, "s1")


class Msg:
    metadata = SimpleNamespace(num_delivered=1)

    async def ack(self) -> None:
        pass


async def start_turn(store: GatedStore, actor: SessionActor) -> asyncio.Task[None]:
    [seq] = await store.append_facts([accepted(1)])
    actor.loaded, actor.last_seq = True, seq - 1  # its input is the next fact it folds
    return asyncio.create_task(actor.handle(Delivered(Msg(), seq, accepted(1))))


async def test_a_quick_call_s_outcome_goes_out_in_the_append_of_its_start() -> None:
    store, model, inbox = GatedStore(), Model(), Inbox()
    actor = actor_over(store, model, inbox)
    handling = await start_turn(store, actor)
    await asyncio.wait_for(model.called.wait(), GUARD_S)
    for _ in range(20):
        await asyncio.sleep(0)
    assert store.batches == []
    assert len(inbox.live) == 1  # its token goes out before the reply is stored
    store.gate.set()
    await asyncio.wait_for(handling, GUARD_S)
    [batch] = store.batches
    assert batch[0] == "SessionTurnStart" and "ProviderRequestStarted" in batch
    assert batch.index("ProviderRequestStarted") < batch.index("ProviderRequestCompleted")
    assert batch[-1] == "SessionTurnEnd"  # the whole text turn in one round trip
    assert inbox.items == []  # the outcome was decided there, not handed to the inbox
    assert [b"token of call 1" in p for p in inbox.live] == [True]
    assert not actor.model_calls  # and the call is over


async def test_a_slow_call_runs_while_its_start_is_appended_and_yields_once_it_is_stored() -> None:
    store, model, inbox = GatedStore(), Model(slow=True), Inbox()
    actor = actor_over(store, model, inbox)
    handling = await start_turn(store, actor)
    await asyncio.wait_for(model.called.wait(), GUARD_S)  # called with the append held up
    for _ in range(20):
        await asyncio.sleep(0)
    assert store.batches == [] and inbox.live == []  # nothing of it is out yet
    store.gate.set()
    await asyncio.wait_for(handling, GUARD_S)
    [batch] = store.batches
    assert "ProviderRequestStarted" in batch and "ProviderRequestCompleted" not in batch
    assert len(inbox.live) == 1  # its token, once the start is stored
    model.release.set()
    await asyncio.wait_for(actor.model_calls.tasks["turn1"], GUARD_S)
    [done] = inbox.items
    assert isinstance(done, ProviderDone) and done.turn_id == "turn1"


async def test_a_refused_append_cancels_its_call_and_the_redone_decision_calls_again() -> None:
    store, model, inbox = GatedStore(conflict=True), Model(slow=True), Inbox()
    actor = actor_over(store, model, inbox)
    handling = await start_turn(store, actor)
    await asyncio.wait_for(model.called.wait(), GUARD_S)
    store.gate.set()  # the first append is refused; the decision is made again from the log
    await asyncio.wait_for(handling, GUARD_S)
    assert (model.calls, model.cancelled) == (2, 1)
    model.release.set()
    await asyncio.wait_for(actor.model_calls.tasks["turn1"], GUARD_S)
    [done] = inbox.items  # the refused decision's call yielded nothing
    assert isinstance(done, ProviderDone)
    assert done.outcome.text == "reply of call 2"  # type: ignore[union-attr]
    assert [b"token of call 2" in p for p in inbox.live] == [True]
    assert [k.count("ProviderRequestStarted") for k in store.batches] == [1, 1]
    assert store.kinds().count("ProviderRequestStarted") == 1


async def test_a_refused_append_of_a_quick_call_s_outcome_drops_it_and_calls_again() -> None:
    store, model, inbox = GatedStore(conflict=True), Model(), Inbox()
    actor = actor_over(store, model, inbox)
    handling = await start_turn(store, actor)
    await asyncio.wait_for(model.called.wait(), GUARD_S)
    store.gate.set()
    await asyncio.wait_for(handling, GUARD_S)
    assert model.calls == 2 and len(store.batches) == 2
    assert inbox.items == []  # call 1's outcome decided nothing
    # its token was out (a preview); the call made again streams again, from index 0
    assert [(b"of call 1" in p, b'"index":0' in p) for p in inbox.live] == [
        (True, True),
        (False, True),
    ]
    assert store.kinds().count("ProviderRequestCompleted") == 1
