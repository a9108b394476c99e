"""Replay and verify over request/reply, for operators and tools (DESIGN §4).

    ts.api.audit.replay  {"sessionId", "atSeq"?}  → {"state", "events", "lastSeq"}
    ts.api.audit.verify  {"sessionId"}            → {"equal", "events", "log", "live"}

`replay` rebuilds a session from the log, as of now or of a sequence, without calling any
model or tool; `verify` compares that with the turn-runner's live state.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from turnstream.bus import Bus
from turnstream.client import live_state, replay_session
from turnstream.core.session import state_from_json, state_to_json

log = logging.getLogger("turnstream.audit")


async def serve_api(bus: Bus) -> list[Any]:
    """Subscribe the two endpoints (a queue group: any audit instance answers)."""
    subjects = bus.subjects

    async def replay(msg: Any) -> None:
        await _answer(msg, lambda query: _replay(bus, query))

    async def verify(msg: Any) -> None:
        await _answer(msg, lambda query: _verify(bus, query))

    return [
        await bus.nc.subscribe(subjects.api("audit", "replay"), queue="audit", cb=replay),
        await bus.nc.subscribe(subjects.api("audit", "verify"), queue="audit", cb=verify),
    ]


async def _answer(msg: Any, work: Any) -> None:
    try:
        query = orjson.loads(msg.data)
        body = orjson.dumps(await work(query))
    except Exception as exc:
        body = orjson.dumps({"error": f"{type(exc).__name__}: {exc}"})
    await msg.respond(body)


async def _replay(bus: Bus, query: dict[str, Any]) -> dict[str, Any]:
    at = query.get("atSeq")
    replayed = await replay_session(
        bus, str(query["sessionId"]), at_seq=None if at is None else int(at)
    )
    state = orjson.loads(state_to_json(replayed.state))
    return {"state": state, "events": len(replayed.events), "lastSeq": replayed.last_seq}


async def _verify(bus: Bus, query: dict[str, Any]) -> dict[str, Any]:
    session_id = str(query["sessionId"])
    replayed = await replay_session(bus, session_id)
    reply = await live_state(bus, session_id)
    return {
        "equal": state_from_json(reply) == replayed.state,
        "events": len(replayed.events),
        "log": orjson.loads(state_to_json(replayed.state)),
        "live": orjson.loads(reply),
    }
