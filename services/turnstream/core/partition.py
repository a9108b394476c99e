"""Which log partition a session's events go to, as nats-server computes it.

A subject mapping `<prefix>.log.*.*` → `<prefix>.log.{{wildcard(1)}}.{{wildcard(2)}}.
{{partition(N,1)}}` sends every event of a session to one of N partition streams. The
server hashes the session token with 32-bit FNV-1a and takes it modulo N
(`getHashPartition` in nats-server's server/subject_transform.go); checked against the
server by bench/partitions_probe.py, vectors in tests/unit/test_partition.py.
"""

from __future__ import annotations

FNV32_OFFSET = 0x811C9DC5
FNV32_PRIME = 0x01000193


def fnv1a_32(data: bytes) -> int:
    """32-bit FNV-1a of `data` (Go's `hash/fnv.New32a`)."""
    h = FNV32_OFFSET
    for byte in data:
        h = ((h ^ byte) * FNV32_PRIME) & 0xFFFFFFFF
    return h


def partition(session_id: str, partitions: int) -> int:
    """The partition (0 … `partitions` - 1) that `{{partition(partitions,1)}}` gives the
    session token `session_id`."""
    if partitions <= 0:
        raise ValueError("partitions must be at least 1")
    return fnv1a_32(session_id.encode()) % partitions
