"""Session leases in the `<prefix>_leases` KV bucket: which instance of a service acts for a
session.

A lease is the key `<namespace>.<session_key(id)>` holding its owner's name (`session.`:
the turn-runner's; `approval.`: the approval service's, so the two never collide), written
with a per-key TTL (`Nats-TTL`) and renewed by an update conditional on the revision we
wrote last, so a renewal cannot overwrite someone else's lease. The holder counts its
lease valid until `TTL` after it *sent* the write (the server's clock starts later, so
this errs early): while a lease is valid here no other instance can hold it. A holder
that was paused past its TTL finds its lease invalid, and its next write fails if anyone
took over.

An expired lease leaves a server-placed marker (`limit_marker_ttl` on the bucket), which
watchers see as a PURGE: that is how the other instances learn that a holder died. A
release is a conditional DEL, which watchers do not act on (a released session has no
open work).

Taking a lease costs one write when the key's revision is known to be a free one: never
written (0: a new session), or the delete or marker last seen on it (`freed`). The write
is conditional on that revision, so a stale guess is refused, never a lease taken over;
then the key is read, and written on what was read.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from turnstream.bus.appender import LogFull
from turnstream.bus.errors import JetStreamError, NotFound
from turnstream.bus.full import ALARM, noted
from turnstream.bus.kv import watch
from turnstream.bus.store import WRONG_LAST_SEQUENCE
from turnstream.bus.streams import LEASE_MARKER_TTL_S
from turnstream.core.subjects import Subjects, session_from_key, session_key

if TYPE_CHECKING:
    from turnstream.bus.port import Bus

log = logging.getLogger("turnstream.bus")
RUNNER_NAMESPACE = "session"
"""The turn-runner's leases: `session.<key>`."""
EXPECTED_LAST = "Nats-Expected-Last-Subject-Sequence"
KNOWN_FREED = 10_000
"""Sessions whose release this instance remembers (the first released forgotten first)."""


class Ownership(enum.Enum):
    KEPT = "kept"
    """We held the lease already: our state of the session is current."""
    NEW = "new"
    """We just acquired it: someone else may have acted since, reload from the log."""
    ELSEWHERE = "elsewhere"
    """Another instance holds it: do not act for this session."""


@dataclass
class _Held:
    revision: int
    valid_until: float
    used_at: float


class LeaseTable:
    """The leases one instance holds, and the operations on the bucket."""

    def __init__(
        self,
        js: Any,
        subjects: Subjects,
        owner: str,
        *,
        ttl_s: float,
        namespace: str = RUNNER_NAMESPACE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.js = js
        self.key_prefix = f"{namespace}."
        self.owner = owner
        self.ttl_s = ttl_s
        self.clock = clock
        self.bucket = subjects.leases_bucket
        self.stream = f"KV_{self.bucket}"
        self.held: dict[str, _Held] = {}
        self.freed: dict[str, int] = {}
        """The revision at which a lease was seen free: our release's delete, or a delete or
        an expiry marker seen by `watch_expiries` (`ensure` first writes on it)."""

    @classmethod
    def on(
        cls, bus: Bus, owner: str, *, ttl_s: float, namespace: str = RUNNER_NAMESPACE
    ) -> LeaseTable:
        """The leases `owner` holds in `namespace` of `bus`'s leases bucket."""
        return cls(bus.js, bus.subjects, owner, ttl_s=ttl_s, namespace=namespace)

    def subject(self, session_id: str) -> str:
        return f"$KV.{self.bucket}.{self.key_prefix}{session_key(session_id)}"

    def holds(self, session_id: str) -> bool:
        """True while our lease on the session is valid (no round trip)."""
        held = self.held.get(session_id)
        return held is not None and held.valid_until > self.clock()

    async def ensure(self, session_id: str) -> Ownership:
        """Make sure we hold the session's lease: keep it, take it if free, or say who has it."""
        held = self.held.get(session_id)
        now = self.clock()
        if held is not None and held.valid_until > now:
            held.used_at = now
            return Ownership.KEPT
        # First a write conditional on the revision the key has if the lease is free: 0 for
        # a key never written (a new session), the delete of our own release, or our own
        # lease expired here. Taken, that is one round trip instead of a read and a write;
        # refused (someone wrote since), the key is read as below.
        guess = held.revision if held is not None else self.freed.pop(session_id, 0)
        written = await self._write(session_id, guess)
        if written is not None:
            self.held[session_id] = _Held(written, now + self.ttl_s, now)
            return Ownership.KEPT if held is not None else Ownership.NEW
        for _ in range(3):  # a write can lose a race with an expiry marker: look again
            start = self.clock()
            revision, owner = await self._latest(session_id)
            if owner is not None and owner != self.owner:
                self.held.pop(session_id, None)
                return Ownership.ELSEWHERE
            # our own lease, still at the revision we wrote: nobody held it in between
            kept = owner == self.owner and held is not None and held.revision == revision
            written = await self._write(session_id, revision)
            if written is not None:
                self.held[session_id] = _Held(written, start + self.ttl_s, start)
                return Ownership.KEPT if kept else Ownership.NEW
        self.held.pop(session_id, None)
        return Ownership.ELSEWHERE

    async def confirm(self, session_id: str) -> bool:
        """Ask the bucket, not our clock, whether the lease is still ours (after a conflict)."""
        held = self.held.get(session_id)
        if held is None:
            return False
        revision, owner = await self._latest(session_id)
        if owner == self.owner and revision == held.revision:
            return True
        if self.held.get(session_id) is held:
            del self.held[session_id]
        return False

    async def renew(self, session_id: str) -> bool:
        """Extend a lease we hold; False (and forgotten) if it is not ours any more."""
        held = self.held.get(session_id)
        if held is None:
            return False
        start = self.clock()
        written = await self._write(session_id, held.revision)
        if written is None:
            if self.held.get(session_id) is held:
                del self.held[session_id]
            return False
        held.revision, held.valid_until = written, start + self.ttl_s
        return True

    async def release(self, session_id: str, *, hand_over: bool = False) -> None:
        """Give a lease up (conditional: a lease someone else took is left alone).

        `hand_over` (open work, e.g. at shutdown) marks it the way an expiry does, so the
        other instances take the session over now rather than after the TTL.
        """
        held = self.held.pop(session_id, None)
        if held is None:
            return
        headers = {"KV-Operation": "DEL", EXPECTED_LAST: str(held.revision)}
        if hand_over:
            headers.update({"KV-Operation": "PURGE", "Nats-TTL": f"{LEASE_MARKER_TTL_S:g}s"})
        try:
            ack = await self.js.publish(self.subject(session_id), b"", headers=headers)
        except JetStreamError as exc:
            if exc.err_code not in WRONG_LAST_SEQUENCE:
                raise
            return
        if not hand_over:
            self._freed(session_id, int(ack.seq))

    def _freed(self, session_id: str, revision: int) -> None:
        """The lease of `session_id` is free at `revision` (released, or expired)."""
        self.freed.pop(session_id, None)
        if len(self.freed) >= KNOWN_FREED:
            del self.freed[next(iter(self.freed))]
        self.freed[session_id] = revision

    async def _latest(self, session_id: str) -> tuple[int, str | None]:
        """The key's last revision (0: none) and its owner (None: free, deleted or expired)."""
        try:
            msg = await self.js.get_last_msg(self.stream, self.subject(session_id))
        except NotFound:
            return 0, None
        headers = msg.headers or {}
        # an expired key can come back as a marker with no value rather than "not found"
        if "KV-Operation" in headers or "Nats-Marker-Reason" in headers or not msg.data:
            return int(msg.seq), None
        return int(msg.seq), bytes(msg.data).decode()

    async def _write(self, session_id: str, last: int) -> int | None:
        """Write our name if the key is still at revision `last`; its new revision, or None."""
        headers = {EXPECTED_LAST: str(last), "Nats-TTL": f"{math.ceil(self.ttl_s)}s"}
        try:
            ack = await self.js.publish(
                self.subject(session_id), self.owner.encode(), headers=headers
            )
        except JetStreamError as exc:
            if exc.err_code in WRONG_LAST_SEQUENCE:
                return None
            if noted(exc, self.subject(session_id)):
                raise LogFull(exc.err_code or 0, str(exc.description)) from exc
            raise
        if ALARM.runs:  # refusals were seen: this write may end them
            ALARM.stored(self.subject(session_id))
        return int(ack.seq)

    async def watch_expiries(
        self,
        on_expired: Callable[[str], None],
        stop: asyncio.Event,
        on_holder: Callable[[str, str | None], None] | None = None,
    ) -> None:
        """Call `on_expired(session)` for each lease of our namespace that expires (its
        holder stopped renewing: it died or was paused), until `stop` is set. `on_holder`,
        if given, is told each lease's holder as the watch sees it (None: free)."""
        prefix = self.key_prefix

        def expired(entry: Any) -> None:
            if not entry.key.startswith(prefix):
                return
            session_id = session_from_key(entry.key[len(prefix) :])
            freed = entry.operation in ("PURGE", "DEL")
            if on_holder is not None:
                on_holder(session_id, None if freed or not entry.value else entry.value.decode())
            if not freed:
                return
            log.debug("lease %s: %s at %d", entry.key, entry.operation, entry.revision)
            if self.holds(session_id):
                return
            self._freed(session_id, int(entry.revision))  # free: `ensure` writes on it
            if entry.operation == "PURGE":
                on_expired(session_id)

        bucket = lambda: self.js.key_value(self.bucket)  # noqa: E731
        await watch(bucket, stop, expired, f"{prefix[:-1]} leases", keys=f"{prefix}>")
