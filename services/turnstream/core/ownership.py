"""Which partitions an instance of a service takes or gives up: the rule, pure.

M live instances share N partitions, each partition held by one of them at a time (a
lease, `runtime/partitions.py`). Each instance holds at most `ceil(N / M)`:

    held > quota          release the surplus (an instance joined: it takes them)
    held < quota          take free partitions up to the quota (free: nobody's lease)
    held = quota          nothing

M instances with `ceil(N / M)` each cover all N (M · ceil(N / M) ≥ N), so every partition
is taken once the instances have acted on the same view; until then a partition may be
free for a round, never held twice (a take is a conditional lease write). With one
partition (the default) one instance holds it and the others stand by.

Each instance ranks the partitions from its own offset (`rank`), so instances prefer
different free partitions (fewer lost races) and keep their most preferred ones when
they give some up; an instance restarted under the same name prefers the same ones.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Collection
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


def rank(partitions: int, member: str) -> list[int]:
    """`member`'s order of preference over the partitions: from its own offset on."""
    offset = zlib.crc32(member.encode()) % partitions
    return [(offset + i) % partitions for i in range(partitions)]


def rebalance(
    partitions: int,
    me: str,
    members: Collection[str],
    held: Collection[int],
    free: Collection[int],
) -> Plan:
    """What `me` does, holding `held`, with `members` seen alive (itself counted whether
    listed or not) and `free` partitions held by nobody."""
    most = quota(partitions, len({*members, me}))
    order = rank(partitions, me)
    mine = [k for k in order if k in held]
    if len(mine) > most:
        return Plan(release=tuple(mine[most:]))
    wanted = [k for k in order if k in free and k not in held]
    return Plan(take=tuple(wanted[: most - len(mine)]))
