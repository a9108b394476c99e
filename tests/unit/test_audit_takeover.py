"""A partition taken over, without NATS: the new holder's fold of the whole partition
records in its audit file only what the file lacks (one chain, every sequence once), and
reports only the violations the previous holder did not append."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import orjson

from tests.unit.audit_events import ended, start, tool_run, turn
from tests.unit.factories import T0
from turnstream.audit.auditor import Auditor
from turnstream.audit.chain import verify
from turnstream.audit.checks import CheckConfig
from turnstream.audit.fold import fold_message
from turnstream.audit.journal import Journal, chain_path, chains_in
from turnstream.core.events import Event, encode

NOW = T0 + timedelta(hours=3)


def fold_into(auditor: Auditor, journal: Journal, log: list[Event], after: int = 0) -> None:
    for seq, event in enumerate(log[after:], after + 1):
        subject = f"ts.log.{event.session_id}.{event.type}"
        fold_message(auditor, journal, seq, subject, encode(event))


def seqs(path: Path) -> list[int]:
    return [orjson.loads(line)["seq"] for line in path.read_bytes().splitlines()]


def test_a_take_over_records_what_its_file_lacks_and_reports_what_the_log_lacks(
    tmp_path: Path,
) -> None:
    log: list[Event] = [*turn("s1", "t1"), ended("s1", "t1", "failed")]
    path = tmp_path / "audit.jsonl"
    # this instance held the partition earlier, up to here
    with Journal(path) as journal:
        fold_into(Auditor.with_config(CheckConfig()), journal, log[:3])
    # meanwhile the other holder appended the violation it found, and more came
    holder = Auditor.with_config(CheckConfig())
    fold_into(holder, Journal(tmp_path / "other.jsonl"), log)
    [reported] = holder.take_violations(NOW, "audit/other")
    log += [reported, start("s2", "t1"), *tool_run("s2", "t1", "inv", approved=False)]
    log += [ended("s2", "t1")]
    # taken back: the whole partition is folded again
    auditor = Auditor.with_config(CheckConfig())
    with Journal(path) as journal:
        fold_into(auditor, journal, log)
    assert seqs(path) == list(range(1, len(log) + 1))
    assert verify(path.read_bytes().splitlines()).ok
    found = auditor.take_violations(NOW, "audit/me")
    assert [v.data.kind for v in found] == ["unapproved_tool_run"]  # not the one in the log
    assert auditor.summaries["s1"].violations == 1


def test_chains_are_one_file_with_one_partition_and_one_per_partition_with_more(
    tmp_path: Path,
) -> None:
    assert chain_path(tmp_path, 1, 0) == tmp_path / "audit.jsonl"
    assert chain_path(tmp_path, 4, 3) == tmp_path / "audit" / "3.jsonl"
    for k in (2, 0, 10):
        with Journal(chain_path(tmp_path, 16, k)):
            pass
    (tmp_path / "audit" / "2-1700000000.jsonl").write_text("")  # kept aside: not a chain
    with Journal(chain_path(tmp_path, 1, 0)):
        pass
    assert [k for k, _ in chains_in(tmp_path)] == [None, 0, 2, 10]


def test_verify_checks_every_chain_of_a_data_dir_and_names_the_bad_partition(
    tmp_path: Path,
) -> None:
    from typer.testing import CliRunner

    from turnstream.cli.audit import audit_app

    for k in (0, 1):
        with Journal(chain_path(tmp_path, 2, k)) as journal:
            fold_into(Auditor.with_config(CheckConfig()), journal, turn(f"s{k}", "t1"))
    runner = CliRunner()
    good = runner.invoke(audit_app, ["verify", str(tmp_path)])
    assert good.exit_code == 0, good.output
    assert "partition 0" in good.output and "partition 1" in good.output
    bad = chain_path(tmp_path, 2, 1)
    lines = bad.read_bytes().splitlines(keepends=True)
    bad.write_bytes(b"".join([lines[0], lines[1].replace(b'"seq":2', b'"seq":9'), *lines[2:]]))
    result = runner.invoke(audit_app, ["verify", str(tmp_path)])
    assert result.exit_code == 1
    assert "partition 1" in result.output and "line 2 is bad" in result.output
    one = runner.invoke(audit_app, ["verify", str(chain_path(tmp_path, 2, 0))])
    assert one.exit_code == 0 and "records intact" in one.output
