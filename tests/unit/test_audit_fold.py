"""The audit's fold of wire bytes: kinds it does not read are only counted, from their
envelope, and come out exactly as a full decode would (file lines, summaries, checks)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.unit.test_contract import ENVELOPE, SAMPLE_DATA
from turnstream.audit import fold
from turnstream.audit.auditor import READ_KINDS, Auditor
from turnstream.audit.chain import verify
from turnstream.audit.checks import CheckConfig, Checks
from turnstream.audit.journal import Journal
from turnstream.core.events import decode, encode
from turnstream.core.summary import SessionSummary, count_event, evolve_summary

UNREAD = sorted(set(SAMPLE_DATA) - READ_KINDS)


def wire(kind: str, **envelope: Any) -> bytes:
    """A sample event of `kind` as a service writes it (`encode`), with envelope changes."""
    raw = {**ENVELOPE, "type": kind, "data": SAMPLE_DATA[kind]}
    return orjson.dumps({**orjson.loads(encode(decode(orjson.dumps(raw)))), **envelope})


def folded(
    tmp_path: Path, name: str, messages: list[bytes], *, lazy: bool = True
) -> tuple[Auditor, bytes]:
    auditor = Auditor.with_config(CheckConfig())
    with Journal(tmp_path / f"{name}.jsonl") as journal:
        for seq, data in enumerate(messages, 1):
            subject = f"ts.log.s1.{_kind(data)}"
            if lazy:
                fold.fold_message(auditor, journal, seq, subject, data)
            else:
                with pytest.MonkeyPatch.context() as patch:
                    patch.setattr(fold, "unread_head", lambda subject, data: None)
                    fold.fold_message(auditor, journal, seq, subject, data)
    return auditor, (tmp_path / f"{name}.jsonl").read_bytes()


def _kind(data: bytes) -> str:
    try:
        return str(orjson.loads(data).get("type"))
    except (orjson.JSONDecodeError, AttributeError):
        return "X"


def assert_same(tmp_path: Path, messages: list[bytes]) -> bytes:
    lazy, lazy_file = folded(tmp_path, "lazy", messages)
    full, full_file = folded(tmp_path, "full", messages, lazy=False)
    assert lazy_file == full_file
    assert lazy.summaries == full.summaries and lazy.checks == full.checks
    assert [s.to_json() for s in lazy.summaries.values()] == [
        s.to_json() for s in full.summaries.values()
    ]
    assert (lazy.dirty, lazy.turned, lazy.last_seq) == (full.dirty, full.turned, full.last_seq)
    return lazy_file


@pytest.mark.parametrize("kind", UNREAD)
def test_a_kind_outside_read_kinds_changes_nothing_but_the_counts(kind: str) -> None:
    """Guards `READ_KINDS`: a case added to `evolve_summary` or `Checks.observe` for a kind
    must add the kind to `SUMMARY_KINDS` / `CHECKED_KINDS`, or the audit skips it."""
    event = decode(wire(kind))
    assert evolve_summary(SessionSummary("s1"), 7, event) == count_event(
        SessionSummary("s1"), 7, event.time
    )
    checks = Checks()
    assert checks.observe(7, event) == [] and checks == Checks()


def test_every_kind_folds_and_records_as_a_full_decode_does(tmp_path: Path) -> None:
    messages = [wire(kind) for kind in sorted(SAMPLE_DATA)]
    messages += [wire(kind, time="2026-01-01T00:00:00.250000Z") for kind in UNREAD]
    file = assert_same(tmp_path, messages)
    assert verify(file.splitlines()).ok
    assert b'"undecodable"' not in file


@pytest.mark.parametrize(
    "change",
    [
        {"time": "2026-01-01T02:00:00+02:00"},  # another form: decoded in full, same result
        {"time": "2026-01-01T00:00:00.5Z"},
        {"time": "2026-01-01T00:00:00,500000Z"},
        {"time": "2026-13-01T00:00:00Z"},
        {"time": 1767225600},
        {"sessionId": None},
        {"sessionId": 5},
        {"turnId": 5},
        {"causationId": None},
        {"schemaVersion": 2},
        {"schemaVersion": 1.0},
        {"data": []},
        {"type": "Nope"},
        {"extra": 1},
    ],
)
def test_an_unread_kind_with_any_other_envelope_comes_out_as_a_full_decode(
    tmp_path: Path, change: dict[str, Any]
) -> None:
    assert_same(tmp_path, [wire("StagePreFired"), wire("StagePostFired", **change)])


def test_a_message_missing_a_field_or_not_json_is_recorded_as_undecodable(
    tmp_path: Path,
) -> None:
    missing = orjson.loads(wire("StagePreFired"))
    del missing["chatId"]
    odd = [b"{not json", b"[1]", b'{"schemaVersion": "2"}']  # the last two: not ValueErrors
    messages = [orjson.dumps(missing), *odd, wire("ProviderRequestStarted")]
    file = assert_same(tmp_path, messages)
    lines = [orjson.loads(line) for line in file.splitlines()]
    assert [line.get("undecodable", False) for line in lines] == [True] * 4 + [False]


def test_the_payload_of_an_unread_kind_is_not_validated(tmp_path: Path) -> None:
    """The cost this fold saves: a `StagePreFired` whose payload a full decode refuses is
    counted and recorded as an event (other consumers still refuse it)."""
    bad = orjson.loads(wire("StagePreFired"))
    bad["data"] = {"stage": "NOT_A_STAGE"}
    auditor, file = folded(tmp_path, "bad", [orjson.dumps(bad)])
    (line,) = [orjson.loads(line) for line in file.splitlines()]
    assert line["type"] == "StagePreFired" and "undecodable" not in line
    assert auditor.summaries["s1"].events == 1


def test_a_redelivered_message_is_folded_and_recorded_once(tmp_path: Path) -> None:
    auditor = Auditor.with_config(CheckConfig())
    with Journal(tmp_path / "a.jsonl") as journal:
        for seq, kind in [(1, "StagePreFired"), (2, "TurnEnded"), (1, "StagePreFired")]:
            fold.fold_message(auditor, journal, seq, f"ts.log.s1.{kind}", wire(kind))
        before = copy.deepcopy(auditor.summaries)
        fold.fold_message(auditor, journal, 2, "ts.log.s1.TurnEnded", wire("TurnEnded"))
    assert auditor.summaries == before and auditor.summaries["s1"].events == 2
    assert len((tmp_path / "a.jsonl").read_bytes().splitlines()) == 2
