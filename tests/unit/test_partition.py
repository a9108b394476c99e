"""The Python partition function against what nats-server 2.15.1 computed: each pair is a
session appended through the mapping `ts.log.*.*` → `ts.log.{{wildcard(1)}}.
{{wildcard(2)}}.{{partition(N,1)}}` and the partition stream its pub ack named
(bench/partitions_probe.py, which checks 300 ids per N on every run)."""

from __future__ import annotations

import pytest

from turnstream.core.partition import fnv1a_32, partition
from turnstream.core.subjects import Subjects

FROM_SERVER = {
    4: {
        "s0": 2, "s1": 1, "s2": 0, "s3": 3, "s4": 2, "s5": 1,
        "01a21562-4e57-7756-94f0-c58584078b17": 2,
        "01a21562-4e57-7756-94f0-c586f929e841": 2,
        "01a21562-4e57-7756-94f0-c58796383539": 3,
        "01a21562-4e57-7756-94f0-c588d01a3b06": 3,
        "chat:94_x-744386": 0, "chat:95_x-752305": 1, "chat:96_x-760224": 3,
        "chat:97_x-768143": 0, "chat:98_x-776062": 0, "chat:99_x-783981": 1,
    },
    16: {
        "s0": 6, "s1": 9, "s2": 0, "s3": 3, "s4": 2, "s5": 5,
        "01a21562-5413-7549-9cfe-d6df8722b9d8": 4,
        "01a21562-5413-7549-9cfe-d6e0832e046a": 10,
        "01a21562-5413-7549-9cfe-d6e19c1b0e4d": 0,
        "01a21562-5413-7549-9cfe-d6e2f6ea5e6c": 14,
        "chat:94_x-744386": 12, "chat:95_x-752305": 9, "chat:96_x-760224": 3,
        "chat:97_x-768143": 12, "chat:98_x-776062": 0, "chat:99_x-783981": 9,
    },
}  # fmt: skip


@pytest.mark.parametrize(
    ("partitions", "session", "expected"),
    [(n, s, k) for n, pairs in FROM_SERVER.items() for s, k in pairs.items()],
)
def test_partition_is_the_servers(partitions: int, session: str, expected: int) -> None:
    assert partition(session, partitions) == expected


def test_fnv1a_32_reference_values() -> None:
    # the published FNV-1a test vectors (and Go's hash/fnv)
    assert fnv1a_32(b"") == 0x811C9DC5
    assert fnv1a_32(b"a") == 0xE40C292C
    assert fnv1a_32(b"foobar") == 0xBF9CF968


def test_one_partition_is_today() -> None:
    assert {partition(f"s{i}", 1) for i in range(100)} == {0}


def test_no_partitions_is_refused() -> None:
    with pytest.raises(ValueError):
        partition("s1", 0)


def test_subjects_name_one_stream_by_default_and_a_stream_per_partition() -> None:
    one = Subjects("ts")
    assert one.log_streams == ["TS_LOG"]
    assert one.log_stream_of("anything") == "TS_LOG"
    four = Subjects("ts", log_partitions=4)
    assert four.log_streams == ["TS_LOG_0", "TS_LOG_1", "TS_LOG_2", "TS_LOG_3"]
    assert four.log_stream_of("s1") == f"TS_LOG_{partition('s1', 4)}"
    with pytest.raises(ValueError, match="TURNSTREAM_LOG_PARTITIONS"):
        Subjects("ts", log_partitions=0)


def test_subjects_parse_stored_and_live_partitioned_log_subjects() -> None:
    subjects = Subjects("acme")
    for subject in ("acme.log.chat:a_b-1.TurnEnded", "acme.log.chat:a_b-1.TurnEnded.17"):
        assert subjects.session_from_log(subject) == "chat:a_b-1"
        assert subjects.type_from_log(subject) == "TurnEnded"
