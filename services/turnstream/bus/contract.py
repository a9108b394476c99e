"""The event store's contract: what it keeps (`StoredEvent`), how a conditional append
fails (`AppendConflict`) and what every store offers (`EventStore`). Two stores keep it
(tests/integration/test_event_store.py runs the same suite against each): sequences grow, a
session's events come back in append order, and an append with `expected_last_seq` fails
with `AppendConflict` when the session moved on. JetStream's is `bus/store.py`, the
in-memory one `bus/memory.py`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import NamedTuple, Protocol

from turnstream.core.events import Event, EventBase


class StoredEvent(NamedTuple):
    seq: int
    event: Event


class Extent(NamedTuple):
    """How far a session's log goes, as the stream's leader said (`EventStore.extent`)."""

    last: int
    """The sequence of its last event (0: none)."""
    events: int
    """How many events it has."""


class AppendConflict(Exception):
    """The session's log moved past `expected_last_seq`: reload and decide again."""

    def __init__(self, session_id: str, expected: int, detail: str = "") -> None:
        super().__init__(f"session {session_id}: expected last seq {expected}; {detail}")
        self.session_id = session_id
        self.expected = expected


class EventStore(Protocol):
    async def append(self, session_id: str, events: Sequence[EventBase]) -> list[int]:
        """Append in order; return each event's sequence."""
        ...

    async def append_decision(
        self, session_id: str, events: Sequence[EventBase], *, expected_last_seq: int
    ) -> int:
        """Append a decider's events in order if the session's last sequence is still
        `expected_last_seq` (else `AppendConflict`, nothing appended); return the last
        one's sequence. Any other failure may leave a prefix of them in the log."""
        ...

    async def append_facts(self, events: Sequence[EventBase]) -> list[int]:
        """Append unconditionally, pipelined, events of any sessions, in order."""
        ...

    async def read_session(
        self,
        session_id: str,
        *,
        after_seq: int = 0,
        known: Mapping[int, Event] | None = None,
        at_least: int = 0,
        latest: bool = False,
        events_before: int | None = None,
        extent: Extent | None = None,
    ) -> list[StoredEvent]:
        """The session's events after `after_seq`, in order. `known`: events the caller has
        decoded already, by sequence (a delivered fact), taken as they are. The read goes
        at least up to the last of them, up to `at_least` (a sequence the caller knows the
        session has: a reader must never see less than it saw) and, if `latest`, up to the
        session's last event on the stream's leader now (one request more), or fails
        (`TimeoutError`). Where `events_before` (how many it has up to `after_seq`) is
        known or `after_seq` is 0, its events are counted first (one request) and the log
        is asked for exactly them: a read asking for more than remain costs the server
        the rest of the stream. Counted, the `known` events may be all there is: then
        nothing is read. `extent`: the caller asked the leader already (`extent`), as
        `latest` would: nothing more is asked before the read."""
        ...

    async def extent(self, session_id: str) -> Extent:
        """The session's last sequence and how many events it has, asked of the stream's
        leader at once (one round trip): what `read_session(latest=True)` asks first."""
        ...

    async def read_all(self, *, after_seq: int = 0) -> list[StoredEvent]:
        """Every event after `after_seq`, in order."""
        ...

    async def last_seq(self, session_id: str) -> int:
        """Sequence of the session's last event; 0 for a session with none."""
        ...

    async def read_kind(self, event_type: str, *, since: datetime) -> list[StoredEvent]:
        """Every event of one kind, across sessions, appended at or after `since`."""
        ...


LOG_START = datetime(1970, 1, 1, tzinfo=UTC)
"""`read_kind(..., since=LOG_START)` reads a kind from the start of the log."""
