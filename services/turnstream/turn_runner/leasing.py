"""The turn-runner's side of session ownership: one runner acts for a session at a time.

A session actor makes sure the session is its runner's before it handles anything and
before each append (`SessionActor.handle`, `.commit`): its lease on a log of one stream
(`turnstream.runtime.leasing.keep_leases` keeps the leases of sessions with open work
renewed, lets idle ones go, and the lease watch wakes sessions whose holder stopped
renewing), its partition on a partitioned log (`ownership.PartitionSessions`).
"""

from __future__ import annotations


class LeaseLost(Exception):
    """Another runner holds the session now: stop acting for it."""
