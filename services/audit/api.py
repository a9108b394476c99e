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
from turnstream.client import live_state
from turnstream.core.turn import SessionState, fold, state_from_json, state_to_json

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


async def _rebuild(bus: Bus, session_id: str, at_seq: int | None) -> tuple[SessionState, int, int]:
    stored = await bus.store.read_session(session_id)
    events = [s.event for s in stored if at_seq is None or s.seq <= at_seq]
    last = max((s.seq for s in stored if at_seq is None or s.seq <= at_seq), default=0)
    return fold(SessionState(session_id), events), len(events), last


async def _replay(bus: Bus, query: dict[str, Any]) -> dict[str, Any]:
    at = query.get("atSeq")
    state, count, last = await _rebuild(bus, str(query["sessionId"]), int(at) if at else None)
    return {"state": orjson.loads(state_to_json(state)), "events": count, "lastSeq": last}


async def _verify(bus: Bus, query: dict[str, Any]) -> dict[str, Any]:
    session_id = str(query["sessionId"])
    state, count, _ = await _rebuild(bus, session_id, None)
    reply = await live_state(bus, session_id)
    return {
        "equal": state_from_json(reply) == state,
        "events": count,
        "log": orjson.loads(state_to_json(state)),
        "live": orjson.loads(reply),
    }
