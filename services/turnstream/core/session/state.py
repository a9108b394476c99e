"""What the session's decider knows: its chat, the workflow attached to it, its agent, the
replies it owes."""

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
class SessionState(ChatState):
    """Everything the decider knows about a session; a fold over its log.

    It is the session's chat with what only a session has added (the attached run, the
    agent, the replies owed): the turn's folds and steps are generic in the chat state
    they are given (`turnstream.core.turn.state.C`), so a session's state handed through
    them comes back a `SessionState`, workflow and all.
    """

    workflow: WorkflowRun | None = None
    """The workflow attached to the session (its stage turns run as lanes inside it)."""
    agent: SessionConfiguredData | None = None
    """The session's agent (`SessionConfigured`); None: the deployment's default agent."""
    unanswered: tuple[Unanswered, ...] = ()
    """Rejected inputs whose rejection is still to be delivered to their `replyTo` (the
    replies it owes: `outbound`)."""
