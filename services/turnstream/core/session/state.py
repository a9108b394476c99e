"""What the session's decider knows, part by part: its chat, the workflow attached to it,
its agent, the replies it owes, its sub-turns."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from turnstream.core.costs import Spent, add_spent
from turnstream.core.events import (
    Envelope,
    FailureClass,
    SecurityMode,
    SessionConfiguredData,
    SpawnMode,
    TurnStatus,
)
from turnstream.core.turn.state import ChatState, PendingInput
from turnstream.core.workflow.state import WorkflowRun


@dataclass(frozen=True)
class Unanswered:
    """An input the gateway rejected whose sender wants a reply (`replyTo`): the runner
    delivers the rejection there, once."""

    turn_id: str
    reply_to: str
    key: str
    hops: int
    reason: str
    envelope: Envelope
    event_id: str


ChildStatus = Literal["running", "ended", "delivered"]


@dataclass(frozen=True)
class ChildResult:
    """How a sub-turn ended, as its parent learnt it."""

    status: TurnStatus
    failure: FailureClass | None
    reply: str
    child_turn_id: str | None
    input: PendingInput | None
    """The parent's record of the child's reply (None: the child's deadline passed)."""


@dataclass(frozen=True)
class Child:
    """A sub-turn this session spawned (`SubTurnSpawned`), until its result is delivered."""

    invocation_id: str
    session_id: str
    turn_id: str
    """The parent turn that spawned it."""
    mode: SpawnMode
    key: str
    """The idempotency key of the child's input: its reply comes `inReplyTo` it."""
    depth: int
    deadline: datetime
    budget: int = 0
    """The share of this turn's sub-turn budget it was given (it costs 1 more)."""
    spawned_at: datetime | None = None
    status: ChildStatus = "running"
    result: ChildResult | None = None
    """The child's reply, once it arrived (`SubTurnEnded` follows)."""
    interrupt: Literal["graceful", "hard"] | None = None
    """Its parent turn was interrupted: the child must be too."""
    interrupt_sent: bool = False
    envelope: Envelope | None = None
    """The envelope of its `SubTurnSpawned`: facts about the child are filed with it."""
    last_event_id: str = ""


@dataclass(frozen=True)
class SessionState:
    """Everything the decider knows about a session; a fold over its log.

    It holds its parts: the session's chat (a `ChatState`, the turn's, as a stage's lane
    is one), the attached run, and what only a session has: its agent, the replies it owes
    and the sub-turns its chat's turns spawned (a stage's turn cannot spawn).
    """

    chat: ChatState
    """The session's own chat and its turns (`turnstream.core.turn`)."""
    workflow: WorkflowRun | None = None
    """The workflow attached to the session (its stage turns run as lanes inside it)."""
    agent: SessionConfiguredData | None = None
    """The session's agent (`SessionConfigured`); None: the deployment's default agent."""
    security_mode: SecurityMode | None = None
    """The session's security mode, once fixed (`turnstream.core.approval.session_mode`):
    its calls are judged in it; None: the deployment's default."""
    unanswered: tuple[Unanswered, ...] = ()
    """Rejected inputs whose rejection is still to be delivered to their `replyTo` (the
    replies it owes: `outbound`)."""
    children: tuple[Child, ...] = ()
    """Sub-turns spawned (delivered ones stay, so a late duplicate reply is known)."""
    early: tuple[tuple[str, ChildResult], ...] = ()
    """Replies of children whose `SubTurnSpawned` is not folded yet (a child can answer
    between its input's publish and the record of it), by the spawn's key."""
    stage_spent: Spent = ()
    """The tokens the turns of its workflow stages used, over every run (per model): with
    the chat's (`ChatState.spent`), what a session budget counts."""

    @property
    def spent(self) -> Spent:
        """What the whole session's model calls used: its chat's and its stages'."""
        if not self.stage_spent:
            return self.chat.spent
        total = self.chat.spent
        for key, used in self.stage_spent:
            total = add_spent(total, key, used)
        return total

    @classmethod
    def of(cls, session_id: str) -> SessionState:
        """A session before its first event."""
        return cls(ChatState(session_id))

    @property
    def session_id(self) -> str:
        return self.chat.session_id
