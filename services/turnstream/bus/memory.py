"""The event store's contract (`bus/contract.py`) kept in a list: for unit tests and for
tools that need no server."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from turnstream.bus.contract import AppendConflict, Extent, StoredEvent
from turnstream.core.events import Event, EventBase


class InMemoryEventStore:
    """The same contract in a list: for unit tests and for tools that need no server."""

    def __init__(self) -> None:
        self.log: list[StoredEvent] = []
        self._ids: dict[str, int] = {}
        self._last: dict[str, int] = {}

    async def append(self, session_id: str, events: Sequence[EventBase]) -> list[int]:
        seqs = []
        for event in events:
            if event.id in self._ids:  # same dedup as Nats-Msg-Id
                seqs.append(self._ids[event.id])
                continue
            seq = len(self.log) + 1
            self.log.append(StoredEvent(seq, event))  # type: ignore[arg-type]
            self._ids[event.id] = seq
            self._last[session_id] = seq
            seqs.append(seq)
        return seqs

    async def append_decision(
        self, session_id: str, events: Sequence[EventBase], *, expected_last_seq: int
    ) -> int:
        if not events:
            raise ValueError("a decision appends at least one event")
        current = self._last.get(session_id, 0)
        if expected_last_seq != current and events[0].id not in self._ids:
            raise AppendConflict(session_id, expected_last_seq, f"last is {current}")
        return (await self.append(session_id, events))[-1]

    async def append_facts(self, events: Sequence[EventBase]) -> list[int]:
        seqs = []
        for event in events:
            seqs.extend(await self.append(event.session_id, [event]))
        return seqs

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
        return [s for s in self.log[after_seq:] if s.event.session_id == session_id]

    async def extent(self, session_id: str) -> Extent:
        events = sum(1 for s in self.log if s.event.session_id == session_id)
        return Extent(self._last.get(session_id, 0), events)

    async def read_all(self, *, after_seq: int = 0) -> list[StoredEvent]:
        return self.log[after_seq:]

    async def read_kind(self, event_type: str, *, since: datetime) -> list[StoredEvent]:
        return [s for s in self.log if s.event.type == event_type and s.event.time >= since]

    async def last_seq(self, session_id: str) -> int:
        return self._last.get(session_id, 0)
