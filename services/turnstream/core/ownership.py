"""Which partitions an instance of a service takes or gives up: the rule, pure.

M live instances share N partitions, each partition held by one of them at a time (a
lease, `runtime/partitions.py`). Every instance computes the same targets from the same
view: each holds floor(N / M), and the N mod M instances that hold the most now (ties by
name) one more, so no instance holds more than ceil(N / M) and none is left idle while
another holds two more than it:

    held > target         release the surplus (an instance joined: it takes them)
    held < target         take free partitions up to the target (free: nobody's lease)
    held = target         nothing

The targets add up to N, so every partition is taken once the instances have acted on the
same view; until then a partition may be free for a round, never held twice (a take is a
conditional lease write). Giving the extra partitions to those holding most keeps what
runs where it runs: with one partition, the instance holding it keeps it and the others
stand by, whatever their names.

Each instance ranks the partitions from its own offset (`rank`), so instances prefer
different free partitions (fewer lost races) and keep their most preferred ones when
they give some up; an instance restarted under the same name prefers the same ones.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Plan:
    take: tuple[int, ...] = ()
    """Free partitions to take, in order (a take may lose a race: it is retried next round)."""
    release: tuple[int, ...] = ()
    """Held partitions to give up (stop their work, then hand the lease over)."""


def quota(partitions: int, members: int) -> int:
    """The most partitions one of `members` live instances holds."""
    return math.ceil(partitions / max(1, members))


def targets(partitions: int, held: Mapping[str, int]) -> dict[str, int]:
    """How many partitions each instance (a key of `held`: how many it holds now) is to
    hold: floor(N / M) each, one more for the N mod M holding most (ties by name)."""
    order = sorted(held, key=lambda member: (-held[member], member))
    base, extra = divmod(partitions, max(1, len(order)))
    return {member: base + (1 if i < extra else 0) for i, member in enumerate(order)}


def rank(partitions: int, member: str) -> list[int]:
    """`member`'s order of preference over the partitions: from its own offset on."""
    offset = zlib.crc32(member.encode()) % partitions
    return [(offset + i) % partitions for i in range(partitions)]


def rebalance(
    partitions: int,
    me: str,
    members: Collection[str],
    holding: Mapping[str, Collection[int]],
    free: Collection[int],
) -> Plan:
    """What `me` does, with `members` seen alive, `holding` the partitions each instance
    holds (an instance holding some counts as alive; `me` always does) and `free`
    partitions held by nobody."""
    counts = dict.fromkeys((*members, me), 0)
    counts.update({member: len(held) for member, held in holding.items()})
    target = targets(partitions, counts)[me]
    order = rank(partitions, me)
    mine = [k for k in order if k in holding.get(me, ())]
    if len(mine) > target:
        return Plan(release=tuple(mine[target:]))
    wanted = [k for k in order if k in free and k not in mine]
    return Plan(take=tuple(wanted[: target - len(mine)]))
