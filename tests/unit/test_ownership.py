"""The partition ownership rule (`core/ownership.py`): instances converge on holding every
partition once, each at most ceil(N / M), whatever order they act in."""

from __future__ import annotations

import random

import pytest

from turnstream.core.ownership import Plan, quota, rank, rebalance, targets


def test_one_partition_one_holder_the_others_stand_by() -> None:
    assert rebalance(1, "a", {"a", "b"}, {}, free=[0]) == Plan(take=(0,))
    assert rebalance(1, "b", {"a", "b"}, {"a": [0]}, free=[]) == Plan()  # a holds it
    # a holder keeps it whatever the names: the extra one goes to whoever holds most
    assert rebalance(1, "b", {"a", "b"}, {"b": [0]}, free=[]) == Plan()
    assert rebalance(1, "a", {"a", "b"}, {"b": [0]}, free=[]) == Plan()


def test_alone_an_instance_takes_every_free_partition() -> None:
    plan = rebalance(4, "a", set(), {}, free=[0, 1, 2, 3])
    assert sorted(plan.take) == [0, 1, 2, 3] and plan.release == ()


def test_an_instance_joining_makes_the_holder_give_up_its_surplus() -> None:
    plan = rebalance(4, "a", {"a", "b"}, {"a": [0, 1, 2, 3]}, free=[])
    assert len(plan.release) == 2 and plan.take == ()
    kept = {0, 1, 2, 3} - set(plan.release)
    assert kept == set(rank(4, "a")[:2])  # its most preferred are kept
    joined = rebalance(4, "b", {"a", "b"}, {"a": kept}, free=plan.release)
    assert sorted(joined.take) == sorted(plan.release)


def test_no_instance_idles_while_another_holds_two_more() -> None:
    holding = {"a": [0, 1], "b": [2, 3]}
    assert targets(4, {"a": 2, "b": 2, "c": 0}) == {"a": 2, "b": 1, "c": 1}
    assert rebalance(4, "b", {"a", "b", "c"}, holding, free=[]).release != ()
    assert rebalance(4, "a", {"a", "b", "c"}, holding, free=[]) == Plan()


def test_a_dead_instance_s_partitions_are_taken_up_to_the_new_target() -> None:
    # three held 2 + 1 + 1 of 4; c died: a and b may now hold 2 each
    assert rebalance(4, "b", {"a", "b"}, {"a": [0, 2], "b": [1]}, free=[3]) == Plan(take=(3,))
    assert rebalance(4, "a", {"a", "b"}, {"a": [0, 2], "b": [1]}, free=[3]) == Plan()


def test_quota_targets_and_rank() -> None:
    assert [quota(4, m) for m in (0, 1, 2, 3, 4, 5)] == [4, 4, 2, 2, 1, 1]
    assert targets(1, {"a": 0, "b": 0}) == {"a": 1, "b": 0}
    assert targets(5, {"a": 0, "b": 3}) == {"b": 3, "a": 2}
    assert sorted(rank(8, "x")) == list(range(8))
    assert rank(8, "x") == rank(8, "x")


@pytest.mark.parametrize(("partitions", "members"), [(1, 3), (4, 2), (4, 3), (5, 2), (32, 5)])
def test_any_order_of_rounds_ends_with_every_partition_held_once(
    partitions: int, members: int
) -> None:
    names = [f"audit_{i}" for i in range(members)]
    rng = random.Random(partitions * 100 + members)
    held: dict[str, set[int]] = {n: set() for n in names}
    # the first instance starts alone with everything, then the others join
    held[names[0]] = set(range(partitions))
    for _ in range(100):
        order = names[:]
        rng.shuffle(order)
        changed = False
        for name in order:
            taken = set().union(*held.values())
            free = [k for k in range(partitions) if k not in taken]
            plan = rebalance(partitions, name, names, held, free)
            held[name] -= set(plan.release)
            held[name] |= set(plan.take)  # a take of a free partition always wins here
            changed |= bool(plan.take or plan.release)
        if not changed:
            break
    else:
        raise AssertionError(f"no end: {held}")
    counts = [len(h) for h in held.values()]
    assert sorted(set().union(*held.values())) == list(range(partitions))
    assert sum(counts) == partitions  # none held twice
    assert max(counts) - min(counts) <= 1
    assert max(counts) <= quota(partitions, members)
