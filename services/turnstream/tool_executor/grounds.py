"""What the tool-executor reads of a session to check that a call's approval is justified
(`turnstream.core.justification`, DESIGN §13) before it runs the call.

The common case costs at most one small request: the session's `SessionConfigured` (its
agent's security mode), asked of the log's leader, and kept once found, since a session's
agent never changes once set (`KNOWN_SESSIONS` of them, the first found forgotten first).
A session without one (the default agent) asks again each time: its profile may come later.
Only a call the mode does not allow without a person reads more: the session's workflows
attached, prompts, answers and grants (each kind filtered, read concurrently).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from turnstream.bus.contract import StoredEvent
from turnstream.core.approval import ApprovalConfig
from turnstream.core.events import (
    Event,
    SecurityMode,
    SessionConfigured,
    ToolInvocationRequested,
)
from turnstream.core.justification import (
    LOG_KINDS,
    Ground,
    Grounds,
    ToolCall,
    Verdict,
    by_rules,
    evolve,
    fold,
    justify,
)

KNOWN_SESSIONS = 4096
"""Sessions whose `SessionConfigured` mode the executor keeps."""


class GroundReads(Protocol):
    """The reads of the log the check makes (`JetStreamEventStore` has them)."""

    async def last_of_kind(self, session_id: str, event_type: str) -> Event | None: ...

    async def read_kind_of(self, session_id: str, event_type: str) -> list[StoredEvent]: ...


class SessionGrounds:
    """Checks requests against the log, one session's grounds at a time."""

    def __init__(
        self, store: GroundReads, config: ApprovalConfig, known: int = KNOWN_SESSIONS
    ) -> None:
        self.store = store
        self.config = config
        self.known = known
        self.modes: dict[str, SecurityMode | None] = {}
        """The mode each session's `SessionConfigured` gives it (None: its profile names
        none), for the sessions that have one."""

    async def check(self, request: ToolInvocationRequested) -> Verdict:
        """Whether the log justifies running `request`'s call, and by what (or why not)."""
        call = ToolCall.requested(request)
        grounds = await self._configured(request.session_id)
        ruled = by_rules(call, grounds, self.config)
        if ruled is not None:
            return ruled
        reads = [self.store.read_kind_of(request.session_id, kind) for kind in LOG_KINDS]
        stored = sorted((s for kind in await asyncio.gather(*reads) for s in kind), key=_seq)
        facts = [s.event for s in stored if isinstance(s.event, Ground)]
        return justify(call, fold(grounds, facts), self.config)

    async def _configured(self, session_id: str) -> Grounds:
        """The session's grounds as far as its `SessionConfigured` goes."""
        if session_id in self.modes:
            return Grounds(mode=self.modes[session_id])
        found = await self.store.last_of_kind(session_id, "SessionConfigured")
        if not isinstance(found, SessionConfigured):
            return Grounds()
        grounds = evolve(Grounds(), found)
        if len(self.modes) >= self.known:
            del self.modes[next(iter(self.modes))]  # the first found
        self.modes[session_id] = grounds.mode
        return grounds


def _seq(stored: StoredEvent) -> int:
    return stored.seq
