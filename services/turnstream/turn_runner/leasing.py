"""The turn-runner's side of session leases: one runner acts for a session at a time.

A session actor makes sure of its lease before it handles anything and before each
append (`SessionActor.handle`, `.commit`); `turnstream.runtime.leasing.keep_leases` keeps
the leases of sessions with open work renewed, lets idle ones go, and the lease watch
wakes sessions whose holder stopped renewing.
"""

from __future__ import annotations


class LeaseLost(Exception):
    """Another runner holds the session now: stop acting for it."""
