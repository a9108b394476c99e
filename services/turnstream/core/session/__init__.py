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

from dataclasses import fields
from typing import Any

import orjson
from pydantic import TypeAdapter

from turnstream.core.session.fold import evolve, fold
from turnstream.core.session.run import follow_session
from turnstream.core.session.state import SessionState
from turnstream.core.turn.state import ChatState

_STATE_ADAPTER: TypeAdapter[SessionState] = TypeAdapter(SessionState)
_CHAT_FIELDS = tuple(f.name for f in fields(ChatState))


def state_to_json(state: SessionState) -> bytes:
    """The session state as JSON (the runner's status API, snapshots, comparisons).

    Flat, as it was when the session's state was its chat's with the rest added: the
    chat's fields beside the session's own, so a snapshot written before still loads and
    `turnstream status` reads the same keys."""
    body: dict[str, Any] = orjson.loads(_STATE_ADAPTER.dump_json(state))
    chat: dict[str, Any] = body.pop("chat")
    summary = chat.pop("summary")
    children, early = body.pop("children"), body.pop("early")
    flat = {**chat, "children": children, "early": early, "summary": summary, **body}
    return orjson.dumps(flat)


def state_from_json(data: bytes) -> SessionState:
    body: dict[str, Any] = orjson.loads(data)
    body["chat"] = {name: body.pop(name) for name in _CHAT_FIELDS if name in body}
    return _STATE_ADAPTER.validate_json(orjson.dumps(body))


__all__ = [
    "SessionState",
    "evolve",
    "fold",
    "follow_session",
    "state_from_json",
    "state_to_json",
]
