"""What the session's decider knows: its chat, and the workflow attached to it."""

from __future__ import annotations

from dataclasses import dataclass

from turnstream.core.turn.state import ChatState
from turnstream.core.workflow.state import WorkflowRun


@dataclass(frozen=True)
class SessionState(ChatState):
    """Everything the decider knows about a session; a fold over its log."""

    workflow: WorkflowRun | None = None
    """The workflow attached to the session (its stage turns run as lanes inside it)."""


def session_of(state: ChatState) -> SessionState:
    """`state` as the session's state it is.

    The turn's steps take and return a `ChatState`, but they copy the state they are given
    (`turnstream.core.immutable.with_changes` keeps its class): a session's state handed
    through them comes back a `SessionState`, workflow and all.
    """
    assert isinstance(state, SessionState), f"not a session's state: {type(state).__name__}"
    return state
