"""The gateway's decider over a batch: every fact only I/O can tell comes in as an input,
each command is read once (no second decision at a chunk boundary), a key used before is
dropped, and a session's agent is set by the first message of the batch naming one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from tests.unit.factories import T0
from turnstream.agents import AgentProfile
from turnstream.core.events import (
    EventBase,
    InputAccepted,
    InputRejected,
    InteractionAnswered,
    SessionConfigured,
    TurnEnded,
)
from turnstream.gateway.check import Inbound
from turnstream.gateway.decider import (
    AgentIs,
    Arrived,
    AttachmentsStored,
    Claimed,
    ClaimKeys,
    Effect,
    Input,
    IntakeState,
    Requested,
    decide_intake,
)
from turnstream.gateway.intake import AskAgent, AskRequested, IntakeConfig, StoreAttachments

BASE = {"type": "message", "sessionId": "s1", "chatId": "c1", "text": "hi"}
BASE["sender"] = {"kind": "human", "id": "u1"}
loaded: list[str] = []


def load_agent(name: str) -> AgentProfile:
    loaded.append(name)
    return AgentProfile(name=name, description=f"the {name} agent", system_prompt="Hi.")


CONFIG = IntakeConfig(4096, "gateway/test", None, load_agent)


def raw(seq: int, **fields: Any) -> Inbound:
    body = {k: v for k, v in {**BASE, **fields}.items() if v is not None}
    return Inbound("s1", orjson.dumps(body), seq, T0, "TS_INBOUND")


def drive(
    raws: list[Inbound], answer: Callable[[Effect], Input]
) -> tuple[list[Effect], tuple[EventBase, ...]]:
    """The batch through the decider as the shell drives it: what it asked, what it
    appends."""
    asked: list[Effect] = []
    decision = decide_intake(IntakeState(), Arrived(tuple(raws)), CONFIG, T0)
    while decision.effects:
        assert not decision.events  # the batch's events come once, at the end
        (effect,) = decision.effects
        asked.append(effect)
        decision = decide_intake(decision.state, answer(effect), CONFIG, T0)
    assert decision.state.settled
    return asked, decision.events


def test_plain_messages_ask_nothing_but_their_claims_and_a_key_used_before_is_dropped() -> None:
    raws = [raw(n, idempotencyKey=f"k{n}", text=f"m{n}") for n in range(1, 4)]
    asked, events = drive(raws, lambda e: Claimed((True, False, True)))
    assert asked == [ClaimKeys((("s1", "k1", 1), ("s1", "k2", 2), ("s1", "k3", 3)))]
    assert [e.data.text for e in events if isinstance(e, InputAccepted)] == ["m1", "m3"]


def test_in_one_batch_the_first_message_naming_an_agent_sets_it_each_read_once() -> None:
    named = [("ana", "k1"), ("bea", "k2"), ("ana", "k3"), ("ana", "k1")]
    raws = [raw(n, agent=a, idempotencyKey=k, text=f"m{n}") for n, (a, k) in enumerate(named)]
    answers: dict[type, Input] = {AskAgent: AgentIs(None)}

    def answer(effect: Effect) -> Input:
        if isinstance(effect, ClaimKeys):
            return Claimed(tuple(key != "k1" or seq == 0 for _, key, seq in effect.claims))
        return answers[type(effect)]

    loaded.clear()
    asked, events = drive(raws, answer)
    assert loaded == ["ana", "bea", "ana", "ana"]  # each command read once, none again
    assert asked == [
        AskAgent("s1"),  # m0: the log knows no agent
        ClaimKeys((("s1", "k1", 0),)),  # m1 must see whether m0 configured the session
        ClaimKeys((("s1", "k3", 2), ("s1", "k1", 3))),  # m1's rejection claims nothing
    ]
    assert [e.data.agent for e in events if isinstance(e, SessionConfigured)] == ["ana"]
    assert [e.data.text for e in events if isinstance(e, InputAccepted)] == ["m0", "m2"]
    [conflict] = [e for e in events if isinstance(e, InputRejected)]
    assert conflict.data.kind == "agent_conflict" and conflict.data.idempotency_key == "k2"


def test_a_configuring_message_whose_key_was_used_before_leaves_the_agent_to_ask_again() -> None:
    raws = [raw(0, agent="ana", idempotencyKey="k1"), raw(1, agent="bea", idempotencyKey="k2")]
    asked, events = drive(
        raws,
        lambda e: Claimed((False,) * len(e.claims)) if isinstance(e, ClaimKeys) else AgentIs(None),
    )
    assert [type(e) for e in asked] == [AskAgent, ClaimKeys, AskAgent, ClaimKeys]
    assert events == ()  # both keys used before: the first commands' events answer


def test_an_answer_to_an_interaction_never_requested_is_rejected_and_claims_nothing() -> None:
    body = {"interactionId": "q-1", "decision": "approve", "idempotencyKey": "a"}
    answer = raw(5, type="answer", text=None, **body)
    asked, events = drive([answer], lambda e: Requested(False))
    assert asked == [AskRequested("s1", "q-1")]
    rejected, ended = events
    assert isinstance(rejected, InputRejected) and rejected.data.kind == "unknown_interaction"
    assert isinstance(ended, TurnEnded)
    found: dict[type, Input] = {AskRequested: Requested(True), ClaimKeys: Claimed((True,))}
    asked, events = drive([answer], lambda e: found[type(e)])
    assert [type(e) for e in events] == [InteractionAnswered]


def test_attachments_are_stored_once_the_agent_is_settled_and_a_missing_one_rejects() -> None:
    attachment = {
        "name": "a.png",
        "mediaType": "image/png",
        "size": 3,
        "sha256": "0" * 64,
    }
    message = raw(9, agent="ana", idempotencyKey="k9", attachments=[attachment])
    answers: dict[type, Input] = {
        AskAgent: AgentIs("bea"),
        StoreAttachments: AttachmentsStored("no object att/000"),
    }
    asked, events = drive([message], lambda e: answers[type(e)])
    assert [type(e) for e in asked] == [AskAgent]  # a conflict stores nothing
    assert isinstance(events[0], InputRejected) and events[0].data.kind == "agent_conflict"
    answers[AskAgent] = AgentIs(None)
    asked, events = drive([message], lambda e: answers[type(e)])
    assert [type(e) for e in asked] == [AskAgent, StoreAttachments]
    rejected = events[0]
    assert isinstance(rejected, InputRejected) and rejected.data.kind == "attachment"
    assert "no object att/000; nothing of the message was taken" in rejected.data.reason
    assert rejected.correlation_id == "k9"
