"""The turn-runner's choice of who acts for a session (`turn_runner/ownership.py`): per
session leases on a log of one stream, whole partitions on a partitioned one; with
partitions, a session is ours while its partition is, and taken again means reload."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from turnstream.bus.leases import LeaseTable, Ownership, _Held
from turnstream.core.subjects import Subjects
from turnstream.runtime.leasing import LeasePolicy
from turnstream.turn_runner.ownership import (
    SERVICE,
    PartitionSessions,
    SessionLeases,
    session_ownership,
)

POLICY = LeasePolicy(ttl_s=2.0, renew_s=0.5, retry_s=0.2, instance_id=None)


def bus(partitions: int) -> Any:
    return SimpleNamespace(js=None, subjects=Subjects("ts", partitions))


def leases(partitions: int) -> LeaseTable:
    return LeaseTable(None, Subjects("ts", partitions), "turn-runner/a", ttl_s=2.0)


def take(owned: PartitionSessions, k: int) -> None:
    """As the owner's round does: the lease written, then the worker started."""
    parts = owned.partitions.parts
    parts.held[str(k)] = _Held(1, parts.clock() + 60, parts.clock())
    owned.takes += 1
    owned.taken[k] = owned.takes


def lose(owned: PartitionSessions, k: int) -> None:
    owned.partitions.parts.held.pop(str(k))
    owned.taken.pop(k)


def a_session_in(subjects: Subjects, k: int) -> str:
    return next(s for s in (f"s-{i}" for i in range(1000)) if subjects.partition_of(s) == k)


def test_one_log_stream_keeps_the_per_session_leases() -> None:
    table = leases(1)
    chosen = session_ownership(bus(1), table, POLICY)
    assert isinstance(chosen, SessionLeases)
    assert chosen.leases is table and chosen.retry_s == POLICY.retry_s
    assert chosen.owner == "turn-runner/a"


def test_a_partitioned_log_is_owned_by_partition_with_no_bounce_delay() -> None:
    chosen = session_ownership(bus(4), leases(4), POLICY)
    assert isinstance(chosen, PartitionSessions)
    assert chosen.retry_s == 0.0 and chosen.partitions.count == 4
    assert chosen.partitions.parts.key_prefix == f"{SERVICE}.part."
    assert chosen.partitions.members.key_prefix == f"{SERVICE}.member."


async def test_a_session_is_ours_while_its_partition_is() -> None:
    owned = PartitionSessions(bus(4), POLICY, "turn-runner/a")
    session = a_session_in(owned.subjects, 2)
    other = a_session_in(owned.subjects, 3)
    assert await owned.ensure(session) is Ownership.ELSEWHERE and not owned.holds(session)
    take(owned, 2)
    assert owned.holds(session) and not owned.holds(other)
    assert await owned.ensure(session) is Ownership.NEW  # first acted for here: reload
    assert await owned.ensure(session) is Ownership.KEPT
    assert await owned.ensure(other) is Ownership.ELSEWHERE
    lose(owned, 2)
    assert await owned.ensure(session) is Ownership.ELSEWHERE and not owned.holds(session)
    take(owned, 2)  # taken back: another runner may have acted meanwhile
    assert await owned.ensure(session) is Ownership.NEW
    assert await owned.ensure(session) is Ownership.KEPT


async def test_a_partition_taken_again_before_its_actor_noticed_means_a_reload() -> None:
    owned = PartitionSessions(bus(4), POLICY, "turn-runner/a")
    session = a_session_in(owned.subjects, 0)
    take(owned, 0)
    assert await owned.ensure(session) is Ownership.NEW
    lose(owned, 0)
    take(owned, 0)
    assert await owned.ensure(session) is Ownership.NEW


async def test_a_session_whose_actor_went_is_forgotten_and_loaded_anew() -> None:
    """What a partitioned runner keeps per session is for its sessions with an actor: one
    let go is forgotten (its next actor loads it anyway), not kept for every session seen."""
    owned = PartitionSessions(bus(4), POLICY, "turn-runner/a")
    in_0 = (f"s-{i}" for i in range(1000) if owned.subjects.partition_of(f"s-{i}") == 0)
    sessions = [next(in_0), next(in_0)]
    take(owned, 0)
    for session in sessions:
        assert await owned.ensure(session) is Ownership.NEW
    assert await owned.ensure(sessions[0]) is Ownership.KEPT
    owned.forget(sessions[0])
    assert sessions[0] not in owned.seen and sessions[1] in owned.seen
    assert await owned.ensure(sessions[0]) is Ownership.NEW
