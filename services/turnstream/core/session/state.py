"""What the session's decider knows, part by part: its chat, the workflow attached to it,
its agent, the replies it owes."""

from __future__ import annotations

from dataclasses import dataclass

from turnstream.core.events import Envelope, SessionConfiguredData
from turnstream.core.turn.state import ChatState
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


@dataclass(frozen=True)
class SessionState:
    """Everything the decider knows about a session; a fold over its log.

    It holds its parts, each folded by its own fold: the session's chat (a `ChatState`, the
    turn's, as a stage's lane is one), the attached run, and what only a session has (its
    agent, the replies it owes).
    """

    chat: ChatState
    """The session's own chat and its turns (`turnstream.core.turn`)."""
    workflow: WorkflowRun | None = None
    """The workflow attached to the session (its stage turns run as lanes inside it)."""
    agent: SessionConfiguredData | None = None
    """The session's agent (`SessionConfigured`); None: the deployment's default agent."""
    unanswered: tuple[Unanswered, ...] = ()
    """Rejected inputs whose rejection is still to be delivered to their `replyTo` (the
    replies it owes: `outbound`)."""

    @classmethod
    def of(cls, session_id: str) -> SessionState:
        """A session before its first event."""
        return cls(ChatState(session_id))

    @property
    def session_id(self) -> str:
        return self.chat.session_id
