"""The partitioned log's names, stream definitions and server configuration (pure: no
server; tests/integration/test_partitions.py and tests/security/test_partitions.py run
them against a real one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.mapping import mapping_text, mappings_conf, partitioned_accounts
from turnstream.bus.scan import one_log_stream
from turnstream.bus.streams import StreamLimits, checked_streams, describe, stream_configs
from turnstream.core.subjects import Subjects

ROOT = Path(__file__).resolve().parents[2]
ONE, FOUR = Subjects("ts"), Subjects("ts", log_partitions=4)


def test_one_partition_changes_nothing() -> None:
    assert ONE.log_kind_live("TurnEnded") == "ts.log.*.TurnEnded"
    assert ONE.deliver("turn-runner", 0) == ONE.deliver("turn-runner") == "ts.deliver.turn-runner"
    assert ONE.log_mappings == {}
    assert mappings_conf(ONE) == ""
    assert [c.name for c in stream_configs(ONE, StreamLimits())] == [
        "TS_INBOUND",
        "TS_LOG",
        "TS_DEAD",
    ]
    assert "mappings" not in EmbeddedServer(Path("/nonexistent")).config()
    accounts = (ROOT / "ops" / "accounts.conf").read_text()
    assert partitioned_accounts(accounts, ONE) == accounts
    assert one_log_stream(ONE, None) == "TS_LOG"


def test_live_kinds_and_deliver_subjects_carry_the_partition() -> None:
    assert FOUR.log_kind("TurnEnded") == "ts.log.*.TurnEnded"  # what a stream stores
    assert FOUR.log_kind_live("TurnEnded") == "ts.log.*.TurnEnded.*"
    assert FOUR.deliver("approval", 3) == "ts.deliver.approval.3"
    assert FOUR.deliver("gateway") == "ts.deliver.gateway"
    assert FOUR.log_partition_subjects(2) == "ts.log.*.*.2"


def test_a_stream_per_partition_with_the_logs_settings_and_a_transform_back() -> None:
    limits = StreamLimits(replicas=3)
    one_log = next(c for c in stream_configs(ONE, limits) if c.name == "TS_LOG")
    parts = [c for c in stream_configs(FOUR, limits) if c.name.startswith("TS_LOG")]
    assert [c.name for c in parts] == FOUR.log_streams
    for k, config in enumerate(parts):
        assert config.subjects == [f"ts.log.*.*.{k}"]
        assert config.subject_transform is not None
        assert config.subject_transform.src == f"ts.log.*.*.{k}"
        assert config.subject_transform.dest == "ts.log.{{wildcard(1)}}.{{wildcard(2)}}"
        for setting in ("allow_direct", "allow_batched", "num_replicas", "max_age", "storage"):
            assert getattr(config, setting) == getattr(one_log, setting), setting
    assert set(FOUR.log_streams) <= set(checked_streams(FOUR))
    assert "TS_LOG" not in checked_streams(FOUR)
    assert len(describe(FOUR, limits)) == 3 + 3


def test_the_mappings_partition_by_session_and_refuse_a_partition_subject() -> None:
    assert FOUR.log_mappings == {
        "ts.log.*.*": "ts.log.{{wildcard(1)}}.{{wildcard(2)}}.{{partition(4,1)}}",
        "ts.log.*.*.*": "ts.refused.log.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}",
    }
    conf = mappings_conf(FOUR)
    assert conf.startswith("mappings: {\n") and conf.endswith("}\n")
    assert '"ts.log.*.*": "ts.log.{{wildcard(1)}}.{{wildcard(2)}}.{{partition(4,1)}}"' in conf
    assert conf in EmbeddedServer(Path("/nonexistent"), subjects=FOUR).config()
    assert "no mapping" in mapping_text(ONE)
    assert conf in mapping_text(FOUR)


def test_the_accounts_file_derived_for_partitions() -> None:
    shipped = (ROOT / "ops" / "accounts.conf").read_text()
    derived = partitioned_accounts(shipped, FOUR)
    assert mappings_conf(FOUR, "    ") in derived
    assert '"ts.log.*.TurnEnded"' not in derived
    assert '"ts.log.*.TurnEnded.*"' in derived
    assert '"ts.log.acme.>"' in derived  # a tenant's sessions: every token after them
    assert '"$JS.API.DIRECT.GET.TS_LOG"' not in derived
    for k in range(4):
        assert f'"$JS.API.DIRECT.GET.TS_LOG_{k}"' in derived
        assert f'"$JS.ACK.TS_LOG_{k}.turn-runner.>"' in derived
        assert f'"$JS.API.STREAM.CREATE.TS_LOG_{k}"' in derived
    assert '"ts.deliver.approval", "ts.deliver.approval.*"' in derived
    assert '"$JS.API.STREAM.INFO.TS_INBOUND"' in derived
    with pytest.raises(ValueError, match="jetstream"):
        partitioned_accounts('users: ["ts.log.*.TurnEnded"]\n', FOUR)


def test_a_partitioned_log_has_no_default_stream() -> None:
    assert one_log_stream(FOUR, "TS_LOG_2") == "TS_LOG_2"
    with pytest.raises(ValueError, match="log_stream_of"):
        one_log_stream(FOUR, None)


def test_streams_mapping_prints_the_snippet_and_the_derived_accounts_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from typer.testing import CliRunner

    from turnstream.cli import app

    monkeypatch.setenv("TURNSTREAM_LOG_PARTITIONS", "4")
    snippet = CliRunner().invoke(app, ["streams", "mapping"])
    assert snippet.exit_code == 0, snippet.output
    assert mappings_conf(FOUR) in snippet.output
    accounts = ROOT / "ops" / "accounts.conf"
    derived = CliRunner().invoke(app, ["streams", "mapping", "--accounts", str(accounts)])
    assert derived.exit_code == 0, derived.output
    assert derived.output == partitioned_accounts(accounts.read_text(), FOUR)


def test_a_tenants_right_on_one_kind_of_its_session_gets_the_partition_token() -> None:
    conf = "accounts { A {\n  jetstream: enabled\n  users: [{ permissions: { subscribe: {\n"
    conf += '    allow: ["ts.log.acme.TurnEnded", "ts.log.acme.>", "ts.live.acme.>"] } } }]\n'
    conf += "} }\n"
    derived = partitioned_accounts(conf, FOUR)
    assert '["ts.log.acme.TurnEnded.*", "ts.log.acme.>", "ts.live.acme.>"]' in derived
