"""Keeping session leases (`turnstream.bus.leases`): what a service that acts for sessions
one instance at a time (the turn-runner, the approval service) runs beside its actors.

A service's actors make sure of their session's lease before they act; `keep_leases`
keeps the leases of sessions with open work renewed, lets idle ones go, and hands them all
over on shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from turnstream.bus.appender import LogFull
from turnstream.bus.leases import LeaseTable
from turnstream.settings import Settings

log = logging.getLogger("turnstream")


@dataclass(frozen=True)
class LeasePolicy:
    ttl_s: float
    renew_s: float
    retry_s: float
    instance_id: str | None
    """A stable name for this instance's leases (None: one unique per process): restarted
    under it, the instance takes its sessions back at once instead of after the TTL."""

    @classmethod
    def from_settings(
        cls, settings: Settings | None, instance_id: str | None = None
    ) -> LeasePolicy:
        """The settings' lease fields (their defaults when there are no settings); the
        instance's name `instance_id`, else the settings'."""
        s = settings or Settings.model_construct()
        name = instance_id or s.instance_id
        return cls(s.lease_ttl_s, s.lease_renew_s, s.lease_retry_s, name)

    def owner(self, source: str) -> str:
        """The name this instance writes into its leases (unique per process unless set)."""
        return self.instance_id or f"{source}/{uuid.uuid4().hex[:8]}"


async def keep_leases(
    leases: LeaseTable,
    policy: LeasePolicy,
    open_work: Callable[[str], bool],
    wake: Callable[[str], None],
    stop: asyncio.Event,
    released: Callable[[str], object] = lambda _session_id: None,
) -> None:
    """Every `renew_s`: keep the leases of sessions with open work (or used since the last
    round), release the others, and tell `released` of each (its actor's state is stale
    from then on: the next holder reloads it). On stop: hand them all over to the other
    instances.

    A lease kept is renewed only once it would not outlive the round after next (a late
    round must not let it lapse): with the default TTL, every other round. A session that
    had one turn is taken and released, and renewed at most once in between."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(policy.renew_s):
                await stop.wait()
        if stop.is_set():
            break
        now = leases.clock()
        keep: list[str] = []
        drop: list[str] = []
        for session_id, held in list(leases.held.items()):
            if now - held.used_at >= policy.renew_s and not open_work(session_id):
                drop.append(session_id)
            elif held.valid_until - now < 2 * policy.renew_s:
                keep.append(session_id)
        renewed = await asyncio.gather(*(leases.renew(s) for s in keep), return_exceptions=True)
        for session_id, ok in zip(keep, renewed, strict=True):
            if isinstance(ok, LogFull):  # the store full: the alarm said so once
                log.debug("lease of %s not renewed: %s", session_id, ok)
            elif isinstance(ok, BaseException):
                log.warning("lease of %s not renewed: %s", session_id, ok)
            elif not ok:
                log.warning("lost the lease of %s; letting it go", session_id)
                wake(session_id)  # the actor finds out and stops acting
        if drop:
            log.debug("releasing %d idle lease(s): %s", len(drop), drop)
        await _release(leases, drop, hand_over=False)
        for session_id in drop:
            released(session_id)
    log.debug("handing %d lease(s) over: %s", len(leases.held), list(leases.held))
    # the actors are being cancelled now, so which sessions were open cannot be told: hand
    # every one over (an idle one costs its next holder one reload)
    await _release(leases, list(leases.held), hand_over=True)


async def _release(leases: LeaseTable, sessions: list[str], *, hand_over: bool) -> None:
    done = await asyncio.gather(
        *(leases.release(s, hand_over=hand_over) for s in sessions), return_exceptions=True
    )
    for session_id, result in zip(sessions, done, strict=True):
        if isinstance(result, BaseException):
            log.warning("lease of %s not released: %s", session_id, result)
