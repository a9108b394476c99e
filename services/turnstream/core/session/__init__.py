"""A session: a fold over its log, and the one decider of what comes next (DESIGN §1.3).

Dependencies go one way: session → workflow → turn. The session's `SessionState` holds
its parts: its chat (a `ChatState` of `turnstream.core.turn`, whose turns it runs), the
attached run, its agent, the replies it owes and the sub-turns its chat spawned
(`subturns.py`: only the session's chat may spawn). A session without a workflow is its
chat's turns; with one, each stage runs as a turn of its own in a lane of the run (a
`ChatState` too; `turnstream.core.workflow` holds the definitions and the run's state),
and `run.py` here decides the stage lifecycle around them.
"""

from __future__ import annotations

from pydantic import TypeAdapter

from turnstream.core.session.fold import evolve, fold
from turnstream.core.session.run import decide
from turnstream.core.session.state import SessionState

_STATE_ADAPTER: TypeAdapter[SessionState] = TypeAdapter(SessionState)


def state_to_json(state: SessionState) -> bytes:
    """The session state as JSON (the runner's status API, snapshots, comparisons)."""
    return _STATE_ADAPTER.dump_json(state)


def state_from_json(data: bytes) -> SessionState:
    return _STATE_ADAPTER.validate_json(data)


__all__ = [
    "SessionState",
    "decide",
    "evolve",
    "fold",
    "state_from_json",
    "state_to_json",
]
