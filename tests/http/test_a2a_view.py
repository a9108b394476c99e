"""The A2A task of a turn, folded from events (pure: `a2a.view.TurnView`) and shown as an
A2A `Task` (`mapping.to_task`)."""

from __future__ import annotations

from datetime import timedelta

from a2a.types.a2a_pb2 import TaskState

from tests.http.test_outcome import ended
from tests.unit.factories import T0, accepted, fact
from turnstream.core.events import (
    InteractionAnswered,
    InteractionAnsweredData,
    InteractionRequested,
    InteractionRequestedData,
    Sender,
    TurnEnded,
    TurnEndedData,
)
from turnstream.http.a2a.mapping import to_task
from turnstream.http.a2a.store import TaskRecord
from turnstream.http.a2a.view import TurnView


def asked(turn: str = "turn1") -> InteractionRequested:
    return fact(  # type: ignore[no-any-return]
        InteractionRequested,
        InteractionRequestedData,
        turn,
        interaction_id="ia1",
        invocation_id="inv1",
        tool="write_file",
        args={"path": "a.txt"},
        deadline=T0 + timedelta(minutes=5),
        prompt="write_file a.txt?",
    )


def answered() -> InteractionAnswered:
    return fact(  # type: ignore[no-any-return]
        InteractionAnswered,
        InteractionAnsweredData,
        interaction_id="ia1",
        decision="approve",
        sender=Sender(kind="agent", id="a2a:x"),
        idempotency_key="k",
        inbound_seq=3,
    )


def test_a_turn_asks_then_completes() -> None:
    view = TurnView("turn1", "s1")
    assert not view.feed(1, accepted(1))  # submitted still: no change to show
    view.feed(2, accepted(2))  # another turn's input: not this task's
    assert view.state == "submitted" and len(view.input_ids) == 1
    assert view.feed(3, asked()) and view.state == "input-required"
    assert view.interaction is not None and view.interaction["tool"] == "write_file"
    assert view.feed(4, answered()) and view.state == "working" and view.interaction is None
    assert view.feed(5, ended("turn1")) and view.state == "completed" and view.reply == "ok"
    assert not view.feed(5, ended("turn1"))  # a sequence seen already: skipped
    assert TurnView.from_dict(view.to_dict()) == view


def test_an_interrupted_turn_is_canceled_a_denied_one_rejected() -> None:
    interrupted = TurnView("turn1", "s1")
    end = ended("turn1")
    data = TurnEndedData(status="failed", failure_class="interrupted", reason="hard")
    interrupted.feed(1, end.model_copy(update={"data": data}))
    assert interrupted.state == "canceled" and interrupted.terminal
    denied = TurnView("turn1", "s1")
    data = TurnEndedData(status="denied", failure_class="policy_denied", reason="no")
    denied.feed(1, TurnEnded.model_validate(end.model_dump() | {"data": data}))
    assert denied.state == "rejected"


def test_the_task_shows_the_prompt_and_then_the_reply() -> None:
    view = TurnView("turn1", "s1")
    view.feed(1, accepted(1))
    view.feed(3, asked())
    task = to_task(TaskRecord(view))
    assert task.id == "turn1" and task.context_id == "s1"
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert "approve" in task.status.message.parts[0].text
    assert task.status.message.parts[1].data.struct_value["interaction"]["interactionId"] == "ia1"
    view.feed(5, ended("turn1"))
    task = to_task(TaskRecord(view), history_length=1)
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert [p.text for a in task.artifacts for p in a.parts] == ["ok"]
    assert len(task.history) == 1
