"""The audit service's pure parts: summaries, invariant checks, the hash chain, the file."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import orjson
import pytest

from tests.unit.audit_events import ended, start, tool_run, turn
from tests.unit.factories import T0
from turnstream.audit.auditor import Auditor
from turnstream.audit.chain import GENESIS, verify
from turnstream.audit.checks import CheckConfig
from turnstream.audit.journal import Journal
from turnstream.core.events import AuditViolation, Event, encode
from turnstream.core.subjects import session_key
from turnstream.core.summary import REPLY_CHARS, SessionSummary, evolve_summary

BOUND = CheckConfig(max_turn_seconds=10, grace_s=5)


def fold(events: Sequence[Event], auditor: Auditor | None = None) -> Auditor:
    auditor = auditor or Auditor.with_config(BOUND)
    for event in events:
        auditor.apply(auditor.last_seq + 1, event)
    return auditor


def kinds(auditor: Auditor) -> list[str]:
    return sorted(v.data.kind for v in auditor.take_violations(T0, "audit/test"))


# ---------------------------------------------------------------- summaries


def test_summary_follows_turns_tokens_and_the_last_reply() -> None:
    summary = SessionSummary("s1")
    for seq, e in enumerate(turn("s1", "t1", reply="first", tools=2), 1):
        evolve_summary(summary, seq, e)
    assert summary.status == "completed" and summary.open_turn is None
    assert (summary.turns, summary.completed, summary.tool_calls) == (1, 1, 2)
    assert (summary.input_tokens, summary.output_tokens) == (10, 4)
    evolve_summary(summary, 100, start("s1", "t2"))
    assert summary.status == "active" and summary.open_turn == "t2"
    assert summary.last_reply == "first" and summary.last_seq == 100


def test_summary_keeps_a_bounded_part_of_a_long_reply() -> None:
    summary = SessionSummary("s1")
    for seq, e in enumerate(turn("s1", "t1", reply="x" * 50_000), 1):
        evolve_summary(summary, seq, e)
    assert summary.last_reply == "x" * REPLY_CHARS


def test_summary_round_trips_as_camel_case_json() -> None:
    summary = SessionSummary("a:b")
    for seq, e in enumerate([*turn("a:b", "t1"), ended("a:b", "t2", "failed")], 1):
        evolve_summary(summary, seq, e)
    wire = orjson.loads(summary.to_json())
    assert wire["sessionId"] == "a:b" and wire["lastSeq"] == 5 and wire["failed"] == 1
    assert SessionSummary.from_json(summary.to_json()) == summary
    assert session_key("a:b") == "a=b"


# ---------------------------------------------------------------- invariant checks


def test_a_clean_log_has_no_violations() -> None:
    auditor = fold([*turn("s1", "t1", tools=2), *turn("s2", "t2"), *turn("s1", "t3")])
    auditor.tick(T0 + timedelta(hours=1))
    assert kinds(auditor) == []
    assert set(auditor.summaries) == {"s1", "s2"}


def test_a_second_terminal_event_is_a_violation_each_time() -> None:
    auditor = fold([*turn("s1", "t1"), ended("s1", "t1", "failed"), ended("s1", "t1")])
    violations = auditor.take_violations(T0, "audit/test")
    assert [v.data.kind for v in violations] == ["duplicate_terminal"] * 2
    assert all(v.session_id == "s1" and v.turn_id == "t1" for v in violations)
    assert violations[0].data.event_seq == 5


def test_a_tool_run_without_approval_is_one_violation_per_invocation() -> None:
    auditor = fold([start("s1", "t1"), *tool_run("s1", "t1", "inv1", approved=False)])
    violations = auditor.take_violations(T0, "audit/test")
    assert [(v.data.kind, v.data.invocation_id) for v in violations] == [
        ("unapproved_tool_run", "inv1")
    ]
    other_session = fold([*tool_run("s1", "t1", "inv9"), *tool_run("s2", "t2", "inv9")[1:]])
    assert kinds(other_session) == ["unapproved_tool_run"]  # approvals are per session


def test_a_turn_open_past_its_bound_is_found_by_the_timer_once() -> None:
    auditor = fold([start("s1", "t1")])
    auditor.tick(T0 + timedelta(seconds=14))
    assert kinds(auditor) == []
    auditor.tick(T0 + timedelta(seconds=16))
    auditor.tick(T0 + timedelta(seconds=17))
    assert kinds(auditor) == ["turn_overdue"]
    auditor.tick(T0 + timedelta(seconds=30))
    assert kinds(auditor) == []


def test_a_late_terminal_event_and_the_timer_report_the_same_violation() -> None:
    late = ended("s1", "t1", "failed", at=T0 + timedelta(seconds=20))
    by_end = fold([start("s1", "t1"), late]).take_violations(T0, "audit/a")
    timed = fold([start("s1", "t1")])
    timed.tick(T0 + timedelta(seconds=16))
    by_timer = timed.take_violations(T0, "audit/b")
    assert [v.id for v in by_end] == [v.id for v in by_timer]
    assert by_end[0].data.kind == "turn_overdue"
    fold([late], timed)
    assert kinds(timed) == []  # already reported


def _agent_events(session: str = "s1") -> dict[str, Event]:
    from tests.unit.audit_events import event
    from turnstream.core.events import (
        InputAccepted,
        MessageSent,
        SubTurnEnded,
        SubTurnSpawned,
    )

    return {
        "input": event(
            InputAccepted,
            session,
            "t1",
            {
                "kind": "message",
                "text": "q",
                "sender": {"kind": "agent", "id": "a"},
                "idempotencyKey": "k",
                "replyTo": "a",
                "inboundSeq": 1,
            },
        ),
        "sent": event(
            MessageSent,
            session,
            "t1",
            {"to": "a", "idempotencyKey": "reply:t1", "hops": 1, "cause": "replyTo"},
        ),
        "spawned": event(
            SubTurnSpawned,
            session,
            "t1",
            {
                "invocationId": "i1",
                "childSessionId": "s1:sub-x",
                "mode": "sync",
                "depth": 1,
                "task": "t",
                "idempotencyKey": "spawn:i1",
                "deadlineS": 10,
            },
        ),
        "child_ended": event(
            SubTurnEnded,
            session,
            "t1",
            {"invocationId": "i1", "childSessionId": "s1:sub-x", "status": "completed"},
        ),
    }


def test_a_reply_and_a_sub_turn_settled_once_are_clean() -> None:
    e = _agent_events()
    log = [e["input"], start("s1", "t1"), e["spawned"], e["child_ended"], e["sent"]]
    auditor = fold([*log, ended("s1", "t1")])
    auditor.tick(T0 + timedelta(seconds=100))
    assert kinds(auditor) == []


def test_a_second_reply_or_child_end_is_a_violation() -> None:
    e = _agent_events()
    again = e["sent"].model_copy(update={"id": "sent-2"})
    twice = e["child_ended"].model_copy(update={"id": "end-2"})
    log = [e["input"], e["spawned"], e["child_ended"], twice, e["sent"], again]
    assert kinds(fold(log)) == ["duplicate_reply", "duplicate_subturn_end"]


def test_a_missing_reply_or_child_end_is_found_by_the_timer() -> None:
    e = _agent_events()
    auditor = fold([e["input"], e["spawned"], ended("s1", "t1")])
    auditor.tick(T0 + timedelta(seconds=4))
    assert kinds(auditor) == []
    auditor.tick(T0 + timedelta(seconds=16))
    assert kinds(auditor) == ["reply_missing", "subturn_unended"]


def test_the_summary_lists_children_and_pending_replies() -> None:
    e = _agent_events()
    summary = SessionSummary("s1")
    for seq, event in enumerate([e["input"], e["spawned"]], 1):
        evolve_summary(summary, seq, event)
    assert summary.pending_replies == ["t1"] and summary.children == {"s1:sub-x": "running"}
    evolve_summary(summary, 3, e["child_ended"])
    evolve_summary(summary, 4, e["sent"])
    assert summary.pending_replies is None and summary.children == {"s1:sub-x": "completed"}
    assert SessionSummary.from_json(summary.to_json()) == summary


def test_violation_ids_are_stable_and_not_reported_again_once_in_the_log() -> None:
    log = [*turn("s1", "t1"), ended("s1", "t1")]
    first = fold(log).take_violations(T0, "audit/1")
    again = fold(log).take_violations(T0 + timedelta(minutes=5), "audit/2")
    assert [v.id for v in first] == [v.id for v in again]
    # a restart folds the log including the violation appended after the fact
    replayed = fold([*log, *first])
    assert replayed.take_violations(T0, "audit/3") == []
    assert replayed.violations == 1 and replayed.summaries["s1"].violations == 1


def test_an_event_at_or_below_the_last_sequence_is_not_folded_twice() -> None:
    auditor = Auditor.with_config(BOUND)
    events = turn("s1", "t1")
    for seq, e in enumerate(events, 1):
        assert auditor.apply(seq, e)
    assert not auditor.apply(len(events), events[-1])
    assert auditor.summaries["s1"].completed == 1
    assert kinds(auditor) == []


def test_a_turn_starting_or_ending_is_written_at_once_other_changes_wait() -> None:
    auditor = fold(tool_run("s1", "t1", "i1"))  # counters only: no turn started or ended
    assert auditor.take_dirty(turned_only=True) == []
    auditor = fold([start("s2", "t2")], auditor)
    assert [s.session_id for s in auditor.take_dirty(turned_only=True)] == ["s2"]
    assert [s.session_id for s in auditor.take_dirty()] == ["s1"]  # the rest, later
    assert auditor.take_dirty() == []


def test_an_ended_turn_keeps_no_event_in_the_checks() -> None:
    auditor = fold([*turn("s1", "t1"), start("s1", "t2")])
    facts = auditor.checks.turns
    assert facts[("s1", "t1")].start is None and facts[("s1", "t1")].ended == 1
    assert facts[("s1", "t2")].start is not None  # open: the timer needs its start
    auditor = fold([ended("s1", "t1")], auditor)
    assert kinds(auditor) == ["duplicate_terminal"]  # the count still catches a second end


def test_written_summaries_beyond_those_changed_last_are_forgotten_with_their_ended_turns() -> None:
    auditor = fold([*turn("s1", "t1", tools=1), *turn("s2", "t2"), start("s3", "t3")])
    auditor = fold([*turn("s4", "t4"), *turn("s5", "t5")], auditor)
    auditor.take_dirty()  # written
    auditor = fold(tool_run("s1", "t1", "late"), auditor)  # s1 changed since: not written
    assert auditor.forget(keep=4) == ["s2"]  # the one changed least recently
    assert list(auditor.summaries) == ["s3", "s4", "s5", "s1"]
    assert auditor.forget(keep=1) == ["s3", "s4", "s5"]  # s1 is dirty: not written yet
    auditor.take_dirty()
    assert auditor.forget(keep=0) == ["s1"]
    assert auditor.summaries == {}
    # s3's summary went (the bucket has it), not its open turn: the timer needs it
    assert set(auditor.checks.turns) == {("s3", "t3")}
    assert auditor.checks.approved == set()


def test_a_session_with_work_open_leaves_its_summary_and_keeps_its_checks() -> None:
    """A turn queued or running: its summary is read back when its session comes again,
    and what the checks keep of its open work stays (its approvals judge its tools)."""
    run = tool_run("s1", "t1", "call")
    approved = fold([start("s1", "t1"), *run[:2]])  # approved, not started yet
    (written,) = approved.take_dirty()
    assert approved.forget(keep=0) == ["s1"] and approved.summaries == {}
    approved.remember(SessionSummary.from_json(written.to_json()))
    approved = fold([*run[2:], ended("s1", "t1")], approved)
    assert kinds(approved) == []  # its tool ran approved, its turn ended once
    never = fold([start("s1", "t1"), *run, ended("s1", "t1")])
    assert approved.summaries["s1"] == never.summaries["s1"]


def test_a_remembered_summary_goes_on_where_it_was_written_and_its_last_end_still_counts() -> None:
    auditor = fold([*turn("s1", "t1"), *turn("s1", "t2")])
    (written,) = auditor.take_dirty()
    stored = written.to_json()
    auditor.forget(keep=0)
    assert auditor.summaries == {}
    auditor.remember(SessionSummary.from_json(stored))
    auditor = fold([ended("s1", "t2"), *turn("s1", "t3")], auditor)
    assert kinds(auditor) == ["duplicate_terminal"]  # t2 ended twice
    again = fold([*turn("s1", "t1"), *turn("s1", "t2"), ended("s1", "t2"), *turn("s1", "t3")])
    assert auditor.summaries["s1"] == again.summaries["s1"]  # as if never forgotten


def test_violations_are_events_of_the_contract() -> None:
    auditor = fold([*turn("s1", "t1"), ended("s1", "t1")])
    (violation,) = auditor.take_violations(T0, "audit/test")
    assert isinstance(violation, AuditViolation)
    assert violation.causation_id == violation.data.event_id
    assert orjson.loads(encode(violation))["type"] == "AuditViolation"


# ---------------------------------------------------------------- the hash chain


def journal_lines(tmp_path: Path, n: int = 6) -> list[bytes]:
    path = tmp_path / "audit.jsonl"
    with Journal(path) as journal:
        for seq, e in enumerate(turn("s1", "t1", tools=1)[:n], 1):
            journal.add(seq, e, encode(e))
    return path.read_bytes().splitlines(keepends=True)


def test_an_untouched_chain_verifies(tmp_path: Path) -> None:
    lines = journal_lines(tmp_path)
    verdict = verify(lines)
    assert verdict.ok and verdict.records == 6 and verdict.last_seq == 6
    assert orjson.loads(lines[0])["prev"] == GENESIS
    assert verdict.head == orjson.loads(lines[-1])["hash"]
    kept = orjson.loads(lines[1])["hash"]
    assert verify(lines, kept).head_line == 2  # a head kept earlier is still in the file
    assert verify(lines[:1], kept).head_line is None  # cut before it


@pytest.mark.parametrize(
    ("tamper", "bad_line"),
    [
        (lambda ls: [*ls[:2], ls[2].replace(b'"s1"', b'"s2"'), *ls[3:]], 3),
        (lambda ls: [*ls[:2], ls[2].replace(b'"seq":3', b'"seq":9'), *ls[3:]], 3),
        (lambda ls: [*ls[:2], ls[2].replace(b":", b": ", 1), *ls[3:]], 3),
        (lambda ls: [*ls[:3], *ls[4:]], 4),  # a line deleted
        (lambda ls: ls[1:], 1),  # the first line deleted
        (lambda ls: [ls[0], ls[2], ls[1], *ls[3:]], 2),  # two lines swapped
        (lambda ls: [*ls[:4], ls[1], *ls[4:]], 5),  # a line copied in
        (lambda ls: [*ls[:5], b"\n", ls[5]], 6),  # an empty line
        (lambda ls: [*ls[:3], b"{not json", *ls[3:]], 4),
    ],
)
def test_any_edit_deletion_or_reorder_names_the_first_bad_line(
    tmp_path: Path, tamper: object, bad_line: int
) -> None:
    lines = journal_lines(tmp_path)
    verdict = verify(tamper(lines))  # type: ignore[operator]
    assert not verdict.ok
    assert verdict.bad_line == bad_line, verdict.reason
    assert verdict.records == bad_line - 1


def test_a_resealed_edit_is_caught_at_the_next_line(tmp_path: Path) -> None:
    from turnstream.audit.chain import seal, unseal

    lines = journal_lines(tmp_path)
    record, _ = unseal(lines[2].rstrip(b"\n"))
    record["type"] = "ToolCallDenied"
    forged, _ = seal({k: v for k, v in record.items() if k != "hash"})
    verdict = verify([*lines[:2], forged + b"\n", *lines[3:]])
    assert verdict.bad_line == 4 and "prev" in (verdict.reason or "")


# ---------------------------------------------------------------- the file


def test_reopening_continues_the_chain_and_skips_recorded_sequences(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    events = turn("s1", "t1", tools=2)
    with Journal(path) as journal:
        for seq, e in enumerate(events[:5], 1):
            journal.add(seq, e, encode(e))
    with Journal(path) as journal:
        assert journal.last_seq == 5
        for seq, e in enumerate(events, 1):  # a redelivery of 1-5, then new ones
            journal.add(seq, e, encode(e))
    lines = path.read_bytes().splitlines()
    assert [orjson.loads(line)["seq"] for line in lines] == list(range(1, len(events) + 1))
    assert verify(lines).ok


def test_a_torn_last_line_is_dropped_on_open(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    events = turn("s1", "t1")
    with Journal(path) as journal:
        for seq, e in enumerate(events[:3], 1):
            journal.add(seq, e, encode(e))
    with open(path, "ab") as file:
        file.write(b'{"seq":4,"id":"half')
    with Journal(path) as journal:
        assert journal.last_seq == 3
        journal.add(4, events[3], encode(events[3]))
    assert verify(path.read_bytes().splitlines()).records == 4


def test_a_file_whose_last_line_was_edited_is_not_chained_onto(tmp_path: Path) -> None:
    lines = journal_lines(tmp_path)
    path = tmp_path / "audit.jsonl"
    path.write_bytes(b"".join([*lines[:-1], lines[-1].replace(b"s1", b"s2")]))
    with pytest.raises(ValueError, match="edited"):
        Journal(path).open()


# ---------------------------------------------------------------- approvals judged again


def _approved(authority: str = "mode", source: str = "turn-runner/1") -> Event:
    from tests.unit.audit_events import event
    from turnstream.core.events import ToolCallApproved

    approved = event(ToolCallApproved, "s1", "t1", {"invocationId": "inv1", "authority": authority})
    return approved.model_copy(update={"source": source})


def _judged(*facts: Event, default: str = "ask") -> Auditor:
    from turnstream.core.approval import ApprovalConfig

    config = CheckConfig(approval=ApprovalConfig(default_mode=default))  # type: ignore[arg-type]
    return fold(list(facts), Auditor.with_config(config))


def test_a_runner_s_approval_of_a_call_waiting_for_a_person_is_a_violation() -> None:
    from tests.unit.test_approval import proposed

    auditor = _judged(start("s1", "t1"), proposed(1), _approved())
    (violation,) = auditor.take_violations(T0, "audit/test")
    assert violation.data.kind == "unjustified_approval"
    assert violation.data.invocation_id == "inv1" and violation.session_id == "s1"
    assert "appended by turn-runner/1" in violation.data.detail
    assert "security mode is ask" in violation.data.detail
    # whatever source it names: the appender writes that field itself
    forged = _judged(proposed(1), _approved("interaction", source="approval/1"))
    assert kinds(forged) == ["unjustified_approval"]


def test_approvals_the_log_justifies_are_clean() -> None:
    from tests.unit.test_approval import proposed
    from tests.unit.test_justification import answer, attached, configured, prompt
    from turnstream.core.justification import ToolCall

    call = ToolCall("inv1", "write_file", {"path": "f1.txt"})
    assert kinds(_judged(proposed(1), _approved(), default="auto")) == []
    assert kinds(_judged(configured("auto"), proposed(1), _approved())) == []
    assert kinds(_judged(attached("write_file"), proposed(1), _approved("workflow"))) == []
    person = (proposed(1), prompt(call), answer("approve"), _approved("interaction", "approval/1"))
    assert kinds(_judged(*person)) == []
    assert kinds(_judged(proposed(1), prompt(call), answer("deny"), _approved())) == [
        "unjustified_approval"
    ]


def test_a_forgotten_session_s_profile_mode_still_judges_its_approvals() -> None:
    from tests.unit.test_approval import proposed
    from tests.unit.test_justification import configured

    auditor = _judged(configured("auto"), *turn("s1", "t0"))
    written = {s.session_id: s for s in auditor.take_dirty()}["s1"]
    assert written.security_mode == "auto"
    auditor.summaries.pop("s1")
    auditor.checks.forget({"s1"})
    assert "s1" not in auditor.checks.grounds
    auditor.remember(SessionSummary.from_json(written.to_json()))
    fold([start("s1", "t1"), proposed(1), _approved()], auditor)
    assert kinds(auditor) == []
