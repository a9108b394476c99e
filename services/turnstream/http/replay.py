"""`GET /v1/sessions/{id}/replay` and `/verify`: a session rebuilt from its log, read-only.

`replay?at=<seq>` is `turnstream replay --at` over HTTP: the log up to that sequence folded
by the same functions the services use (the session decider's state, the approval fold, the
workflow view); no model or tool is called. `verify` is `turnstream replay --verify`: the
state rebuilt from the whole log compared with the turn-runner's live state. The console's
replay slider and workflow graph read these; the app keeps nothing between requests.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Query
from starlette.responses import Response

from turnstream.client import live_state, replay_session
from turnstream.core.session import state_from_json
from turnstream.core.workflow.state import WorkflowRun
from turnstream.core.workflow.view import stage_rows
from turnstream.http.context import Caller, Ctx, SessionId
from turnstream.http.problems import Problem
from turnstream.http.reads import _camel, json, open_prompt_rows

router = APIRouter(prefix="/v1/sessions/{id}", tags=["replay"])


@router.get(
    "/replay",
    summary="The session's state rebuilt from its log, as of now or of a log sequence",
    responses={404: {"description": "no such session"}},
)
async def get_replay(
    ctx: Ctx,
    who: Caller,
    session: SessionId,
    at: Annotated[int | None, Query(ge=0, description="Fold the events up to this seq")] = None,
) -> Response:
    who.require("read", session)
    # the same rebuild as `turnstream replay --at` (it reads an archived part first)
    state, events, last, head = await replay_session(ctx.bus, session, at_seq=at)
    if not head:
        raise Problem(404, "not_found", "Not found", f"session {session} has no events")
    pending = open_prompt_rows(session, events)
    chat = state.chat
    active = chat.active
    return json(
        {
            "sessionId": session,
            "at": last,
            "event": _head(events[-1]) if events else None,
            "events": len(events),
            "lastSeq": head,
            "turnsEnded": chat.turns_ended,
            "lastStatus": chat.last_status,
            "active": None
            if active is None
            else {
                "turnId": active.turn_id,
                "stage": active.stage,
                "iteration": active.iteration,
                "calls": [{"tool": c.tool, "status": c.status} for c in active.calls],
            },
            "queued": len(chat.pending),
            "history": [_camel(dataclasses.asdict(m)) for m in chat.history],
            "pendingApprovals": pending,
            "workflow": None if state.workflow is None else workflow_view(state.workflow),
        }
    )


@router.get(
    "/verify",
    summary="`replay --verify`: the state rebuilt from the log equals the turn-runner's live one",
    responses={503: {"description": "the turn-runner did not answer"}},
)
async def get_verify(ctx: Ctx, who: Caller, session: SessionId) -> Response:
    who.require("read", session)
    rebuilt, events, last, _ = await replay_session(ctx.bus, session)
    try:
        live = await live_state(ctx.bus, session)
        if b'"error"' in live[:20]:
            raise RuntimeError(orjson.loads(live).get("error"))
        equal = state_from_json(live) == rebuilt
    except Exception as exc:  # no responders, a timeout, an error answer
        raise Problem(
            503,
            "unavailable",
            "Turn-runner unavailable",
            f"the turn-runner did not answer ({type(exc).__name__}); is it running?",
        ) from None
    return json({"equal": equal, "events": len(events), "lastSeq": last})


def workflow_view(run: WorkflowRun) -> dict[str, Any]:
    """The run as the console draws it: the definition's steps and each stage's row."""
    definition = run.definition
    return {
        "runId": run.run_id,
        "name": run.name,
        "status": run.status,
        "step": run.step,
        "reason": run.reason,
        "steps": [{"stages": list(s.stages), "join": s.join} for s in definition.steps],
        "onFail": dict(definition.on_fail),
        "rows": [_camel(dataclasses.asdict(r)) for r in stage_rows(run)],
    }


def _head(event: Any) -> dict[str, Any]:
    return {"type": event.type, "time": event.time.isoformat(), "turnId": event.turn_id}
