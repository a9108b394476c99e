"""The gateway's pure intake: each kind of bad input gets its own specific rejection."""

from __future__ import annotations

import orjson
import pytest

from tests.unit.factories import T0
from turnstream.core.events import (
    InputAccepted,
    InputRejected,
    InterruptReceived,
    TurnEnded,
    WorkflowAttached,
)
from turnstream.core.subjects import REJECTED_SESSION, Subjects
from turnstream.core.workflow.definition import Step, WorkflowDef
from turnstream.gateway.check import Inbound
from turnstream.gateway.intake import intake

GOOD = {
    "type": "message",
    "sessionId": "s1",
    "chatId": "c1",
    "sender": {"kind": "human", "id": "u1"},
    "text": "hello",
    "idempotencyKey": "k1",
    "replyTo": None,
}
NO_TEXT = {k: v for k, v in GOOD.items() if k != "text"}


def run(
    body: object,
    *,
    token: str = "s1",
    max_bytes: int = 4096,
    seq: int = 1,
    msg_id: str | None = None,
    door: str | None = None,
):
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    raw = Inbound(
        session_token=token,
        data=data,
        seq=seq,
        stored_at=T0,
        stream="TS_INBOUND",
        msg_id=msg_id,
        door=door,
    )
    return intake(raw, max_bytes=max_bytes, now=T0, source="gateway/test")


def rejection(events) -> InputRejected:
    assert len(events) == 2
    rejected, ended = events
    assert isinstance(rejected, InputRejected)
    assert isinstance(ended, TurnEnded)
    assert ended.data.status == "failed"
    assert ended.data.failure_class == "invalid_input"
    assert ended.data.next_action and ended.data.reason == rejected.data.reason
    assert ended.turn_id == rejected.turn_id and ended.causation_id == rejected.id
    return rejected


def test_a_good_message_is_accepted_with_assigned_ids() -> None:
    (event,) = run(GOOD, seq=7)
    assert isinstance(event, InputAccepted)
    assert event.data.text == "hello" and event.data.inbound_seq == 7
    assert event.turn_id and event.trace_id and event.turn_id != event.id
    assert event.correlation_id == "k1"
    assert event.data.sender.kind == "human"


def test_redelivery_yields_the_same_event_ids() -> None:
    assert run(GOOD, seq=3)[0].id == run(GOOD, seq=3)[0].id
    assert run(GOOD, seq=3)[0].id != run(GOOD, seq=4)[0].id


def test_agents_take_the_same_path_as_humans() -> None:
    (event,) = run({**GOOD, "sender": {"kind": "agent", "id": "planner"}, "replyTo": "s2"})
    assert isinstance(event, InputAccepted) and event.data.reply_to == "s2"


@pytest.mark.parametrize(
    ("body", "token", "kind", "needle"),
    [
        (b"{not json", "s1", "not_json", "not JSON"),
        (b"[1, 2]", "s1", "not_json", "expected an object"),
        (NO_TEXT, "s1", "schema", "text"),
        ({**GOOD, "sender": {"kind": "robot", "id": "x"}}, "s1", "schema", "sender"),
        ({**GOOD, "sessionId": "other"}, "s1", "schema", "differs"),
        ({**GOOD, "type": "dance"}, "s1", "unknown_type", "dance"),
        ({**GOOD, "sessionId": "bad id!"}, "bad id!", "bad_session_id", "session id"),
        ({**GOOD, "extra": 1}, "s1", "schema", "extra"),
        ({**NO_TEXT, "type": "attach", "workflow": "review"}, "s1", "unsupported", "workflow"),
        (
            {**NO_TEXT, "type": "answer", "interactionId": "i", "decision": "maybe"},
            "s1",
            "schema",
            "decision",
        ),
    ],
)
def test_bad_input_gets_a_specific_rejection(body, token, kind, needle) -> None:
    rejected = rejection(run(body, token=token))
    assert rejected.data.kind == kind
    assert needle in rejected.data.reason + " ".join(rejected.data.errors)


ANSWER = {**NO_TEXT, "type": "answer", "interactionId": "i1", "decision": "approve"}


@pytest.mark.parametrize(
    "body",
    [
        ANSWER,
        {**GOOD, "type": "steer"},
        {**NO_TEXT, "type": "attach", "workflow": "review"},
    ],
)
def test_the_agent_subject_takes_no_answer_steer_or_attach(body) -> None:
    """`<prefix>.in.<session>.agent` is the turn-runner's door: a compromised runner must
    not answer a prompt for a person (nor steer or attach) through the gateway."""
    rejected = rejection(run(body, door="agent"))
    assert rejected.data.kind == "not_permitted"
    assert body["type"] in rejected.data.reason and "in.<session>.agent" in rejected.data.reason
    assert rejected.correlation_id == "k1"


def test_the_agent_subject_takes_a_message_and_an_interrupt() -> None:
    (message,) = run({**GOOD, "sender": {"kind": "agent", "id": "s2"}}, door="agent")
    assert isinstance(message, InputAccepted)
    interrupt = {**NO_TEXT, "type": "interrupt", "mode": "hard"}
    (event,) = run(interrupt, door="agent")
    assert isinstance(event, InterruptReceived)
    (answered,) = run(ANSWER)  # the same answer from outside is taken
    assert answered.type == "InteractionAnswered"


def test_every_inbound_form_names_the_session() -> None:
    subjects = Subjects("acme")
    assert subjects.inbound_agent("s:1") == "acme.in.s:1.agent"
    assert subjects.inbound_answer("s:1") == "acme.in.s:1.answer"
    forms = (subjects.inbound("s:1"), subjects.inbound_agent("s:1"), subjects.inbound_answer("s:1"))
    for subject in forms:
        assert subjects.session_from_inbound(subject) == "s:1"
    assert [subjects.door_of(s) for s in forms] == [None, "agent", "answer"]
    for name in ("agent", "answer"):  # sessions named like a door
        assert subjects.door_of(subjects.inbound(name)) is None
        assert subjects.session_from_inbound(subjects.inbound(name)) == name
        assert subjects.door_of(subjects.inbound_answer(name)) == "answer"
        assert subjects.session_from_inbound(subjects.inbound_agent(name)) == name


@pytest.mark.parametrize(
    "body",
    [
        GOOD,
        {**GOOD, "type": "steer"},
        {**NO_TEXT, "type": "interrupt", "mode": "hard"},
        {**NO_TEXT, "type": "attach", "workflow": "review"},
    ],
)
def test_the_answer_subject_takes_nothing_but_an_answer(body) -> None:
    """`<prefix>.in.<session>.answer` is the approver's door: an approver may decide a
    prompt, not start, steer, stop or attach a turn."""
    rejected = rejection(run(body, door="answer"))
    assert rejected.data.kind == "not_permitted"
    assert body["type"] in rejected.data.reason and "in.<session>.answer" in rejected.data.reason
    assert "takes only answer" in rejected.data.reason
    assert rejected.correlation_id == "k1"


def test_the_answer_subject_takes_an_answer() -> None:
    (answered,) = run(ANSWER, door="answer")
    assert answered.type == "InteractionAnswered"
    assert answered.data.interaction_id == ANSWER["interactionId"]


def test_oversize_is_rejected_before_parsing() -> None:
    rejected = rejection(run({**GOOD, "text": "x" * 5000}, max_bytes=4096))
    assert rejected.data.kind == "oversize" and rejected.data.size > 4096
    assert len(rejected.data.excerpt) <= 512


def test_bad_session_id_is_recorded_under_the_reserved_session() -> None:
    rejected = rejection(run(GOOD, token="a.b"))
    assert rejected.session_id == REJECTED_SESSION
    assert rejected.data.idempotency_key == "k1" and rejected.correlation_id == "k1"


def test_not_json_keeps_an_excerpt_and_the_inbound_sequence() -> None:
    rejected = rejection(run(b"\xff\xfe garbage", seq=42))
    assert rejected.data.inbound_seq == 42 and "garbage" in rejected.data.excerpt


def test_interrupt_is_recorded_as_a_fact() -> None:
    (event,) = run({**NO_TEXT, "type": "interrupt", "mode": "hard"})
    assert isinstance(event, InterruptReceived) and event.data.mode == "hard"


def test_an_answer_is_recorded_for_the_approval_service() -> None:
    from turnstream.core.events import InteractionAnswered

    body = {**NO_TEXT, "type": "answer", "interactionId": "q1", "decision": "deny", "reason": "no"}
    (event,) = run(body, seq=5)
    assert isinstance(event, InteractionAnswered)
    assert event.data.interaction_id == "q1" and event.data.decision == "deny"
    assert event.data.sender.id == "u1" and event.data.inbound_seq == 5


def attach_body(workflow: str = "review") -> dict:
    return {**NO_TEXT, "type": "attach", "workflow": workflow, "ctx": {"task": "t"}}


def test_an_attach_carries_the_checked_definition_and_ctx() -> None:
    definition = WorkflowDef("review", (Step(("plan",)),), {})
    raw = Inbound("s1", orjson.dumps(attach_body()), 7, T0, "TS_INBOUND")

    def loader(session: str, name: str) -> WorkflowDef:
        assert (session, name) == ("s1", "review")
        return definition

    (event,) = intake(raw, max_bytes=4096, now=T0, source="gw/1", load_workflow=loader)
    assert isinstance(event, WorkflowAttached)
    assert event.data.ctx == {"task": "t"} and event.data.inbound_seq == 7
    assert WorkflowDef.from_dict(event.data.definition) == definition


def test_an_attach_that_does_not_load_is_rejected_with_every_problem() -> None:
    raw = Inbound("s1", orjson.dumps(attach_body()), 7, T0, "TS_INBOUND")

    def loader(session: str, name: str) -> WorkflowDef:
        error = ValueError("workflow review has 2 problem(s)")
        error.errors = ["plan.md: turnCap: ...", "plan.md: id: ..."]  # type: ignore[attr-defined]
        raise error

    events = intake(raw, max_bytes=4096, now=T0, source="gw/1", load_workflow=loader)
    rejected = rejection(events)
    assert rejected.data.kind == "workflow_invalid" and len(rejected.data.errors) == 2
    # the sender (`workflow attach`) matches the rejection by its idempotency key
    assert rejected.data.idempotency_key == "k1" and rejected.correlation_id == "k1"
    assert isinstance(events[1], TurnEnded) and events[1].data.failure_class == "invalid_input"


def test_an_unparsable_body_is_matched_by_its_nats_msg_id() -> None:
    rejected = rejection(run(b"{not json", msg_id="key-7"))
    assert rejected.data.kind == "not_json"
    assert rejected.correlation_id == "key-7" and rejected.data.idempotency_key == "key-7"


def test_a_body_key_wins_over_the_header() -> None:
    rejected = rejection(run({**GOOD, "type": "dance"}, msg_id="header-key"))
    assert rejected.correlation_id == "k1"


@pytest.mark.parametrize(
    ("body", "token"),
    [
        ({**GOOD, "sessionId": REJECTED_SESSION}, REJECTED_SESSION),
        ({**GOOD, "sessionId": REJECTED_SESSION}, "s1"),
    ],
)
def test_the_rejected_session_is_reserved(body, token) -> None:
    rejected = rejection(run(body, token=token))
    assert rejected.data.kind == "bad_session_id" and "reserved" in rejected.data.reason
    assert rejected.correlation_id == "k1"


def test_a_reply_to_the_rejected_session_is_refused() -> None:
    rejected = rejection(run({**GOOD, "replyTo": REJECTED_SESSION}))
    assert rejected.data.kind == "schema" and "reserved" in rejected.data.reason


def test_an_answer_to_an_unknown_interaction_is_rejected_naming_it() -> None:
    from turnstream.core.events import InteractionAnswered
    from turnstream.gateway.intake import reject_unknown_answer

    body = {**NO_TEXT, "type": "answer", "interactionId": "q-404", "decision": "approve"}
    raw = Inbound("s1", orjson.dumps(body), 9, T0, "TS_INBOUND")
    (answered,) = intake(raw, max_bytes=4096, now=T0, source="gw/1")
    assert isinstance(answered, InteractionAnswered)
    rejected = rejection(reject_unknown_answer(raw, answered, now=T0, source="gw/1"))
    assert rejected.data.kind == "unknown_interaction" and "q-404" in rejected.data.reason
    assert rejected.session_id == "s1" and rejected.correlation_id == "k1"
