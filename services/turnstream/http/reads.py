"""`GET` routes: sessions (the audit projection), a session's log in pages, approvals,
workflows, agents. Everything is read from NATS on each request; the app keeps nothing."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Query
from pydantic.alias_generators import to_camel
from starlette.responses import Response

from turnstream.bus.errors import BucketMissing, KeyMissing, NoKeys
from turnstream.bus.kv import recent_values
from turnstream.client import pending_prompts
from turnstream.core import approval
from turnstream.core.costs import PriceTable, spend
from turnstream.core.events import Event
from turnstream.core.events.agents import (
    SessionConfigured,
    SubTurnEnded,
    SubTurnResultDelivered,
    SubTurnSpawned,
)
from turnstream.core.projection import build_view
from turnstream.core.subjects import session_key
from turnstream.core.summary import SessionSummary, SummaryStatus
from turnstream.http.context import Caller, Ctx, SessionId
from turnstream.http.problems import Problem

router = APIRouter(prefix="/v1", tags=["reads"])
MAX_PAGE = 1000


def json(body: Any) -> Response:
    return Response(orjson.dumps(body), media_type="application/json")


@router.get("/sessions", summary="Sessions (the audit projection): the changed last, or by id")
async def list_sessions(
    ctx: Ctx,
    who: Caller,
    after: Annotated[str | None, Query(description="Cursor: the previous page's last id")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    order: Annotated[
        Literal["id", "recent"],
        Query(description="`recent`: the `limit` changed last, latest first (no cursor)"),
    ] = "id",
    status: Annotated[SummaryStatus | None, Query(description="Only sessions in it")] = None,
    since: Annotated[datetime | None, Query(description="Only sessions changed since")] = None,
) -> Response:
    """`total` is how many sessions there are (all statuses, all readers); by id, a page
    filtered by `status` or `since` may hold fewer than `limit` and still have a `next`."""
    who.require("read")

    def wanted(value: bytes | None) -> bool:
        if not value:
            return False
        summary = SessionSummary.from_json(value)
        changed = summary.updated_at
        return (
            who.allows("read", summary.session_id)
            and (status is None or summary.status == status)
            and (since is None or (changed is not None and changed >= _aware(since)))
        )

    kv = await _sessions_kv(ctx)
    if order == "recent":  # read back from the bucket's end: costs the page, not the total
        bucket = ctx.bus.subjects.sessions_bucket
        recent, total = await recent_values(ctx.bus.nc, bucket, lambda _k, v: wanted(v), limit)
        items = [orjson.Fragment(v) for _, v in recent]
        return json({"items": items, "total": total, "next": None})
    try:
        keys = await kv.keys()
    except NoKeys:
        keys = []
    ids = sorted(k.replace("=", ":") for k in keys)
    total = len(ids)
    ids = [s for s in ids if who.allows("read", s) and (after is None or s > after)]
    page = ids[:limit]
    values = await asyncio.gather(*(_summary(kv, s) for s in page))
    items = [orjson.Fragment(v) for v in values if v is not None and wanted(v)]
    return json({"items": items, "total": total, "next": page[-1] if len(ids) > limit else None})


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo else when.replace(tzinfo=UTC)


@router.get(
    "/sessions/{id}",
    summary="One session: its summary, turns, pending approval and children",
    responses={404: {"description": "no such session"}},
)
async def get_session(ctx: Ctx, who: Caller, session: SessionId) -> Response:
    who.require("read", session)
    stored = await ctx.bus.store.read_session(session)
    summary = None
    try:
        summary = await _summary(await _sessions_kv(ctx), session)
    except Problem:
        pass  # no audit projection yet: the log still answers
    if not stored and summary is None:
        raise Problem(404, "not_found", "Not found", f"session {session} has no events")
    events = [s.event for s in stored]
    view = build_view(session, events)
    pending = open_prompt_rows(session, events)
    turns = []
    for turn in view.turns.values():
        row = dataclasses.asdict(turn)
        row["durationMs"] = turn.duration_ms
        row["spend"] = spend_row(turn.models, ctx.prices)
        turns.append(_camel(row))
    return json(
        {
            "sessionId": session,
            "summary": orjson.Fragment(summary) if summary else None,
            "lastSeq": stored[-1].seq if stored else 0,
            "events": len(stored),
            "spend": spend_row(view.models(), ctx.prices),
            "turns": turns,
            "pendingApprovals": pending,
            "agent": _agent(events),
            "children": _children(events),
        }
    )


def open_prompt_rows(session: str, events: list[Event]) -> list[dict[str, Any]]:
    """The session's open approval prompt (at most one), as the routes show it."""
    found = approval.open_interaction(approval.fold(approval.ApprovalState(session), events))
    if found is None:
        return []
    interaction, proposal = found
    return [
        {
            "interactionId": interaction.interaction_id,
            "invocationId": interaction.invocation_id,
            "turnId": proposal.event.turn_id,
            "tool": proposal.event.data.tool,
            "args": proposal.event.data.args,
            "deadline": interaction.deadline,
            "answered": interaction.answer is not None,
        }
    ]


@router.get("/sessions/{id}/events", summary="A page of the session's log, in order")
async def get_events(
    ctx: Ctx,
    who: Caller,
    session: SessionId,
    after: Annotated[int, Query(ge=0, description="TS_LOG sequence to start after")] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
) -> Response:
    who.require("read", session)
    page, more = await ctx.hub.direct.page(session, after=after, limit=limit)
    items = [{"seq": r.seq, "event": orjson.Fragment(r.data)} for r in page]
    return json({"items": items, "next": page[-1].seq if more and page else None})


@router.get("/approvals", summary="Open approval prompts (from the approval service)")
async def list_approvals(
    ctx: Ctx,
    who: Caller,
    session: Annotated[str | None, Query(description="Only this session's")] = None,
) -> Response:
    who.require("read", session)
    try:
        pending = await pending_prompts(ctx.bus, session)
    except Exception as exc:  # no responders, timeout: the service is not there
        raise Problem(
            503,
            "unavailable",
            "Approval service unavailable",
            f"the approval service did not answer ({type(exc).__name__}); is it running?",
        ) from None
    return json({"items": [p for p in pending if who.allows("read", p.get("sessionId"))]})


@router.get("/workflows", summary="Workflow definitions in TURNSTREAM_WORKFLOWS")
async def list_workflows(ctx: Ctx, who: Caller) -> Response:
    who.require("read")
    settings = ctx.settings
    found = await asyncio.to_thread(_workflows, settings.workflows, list(settings.mcp.servers))
    return json({"items": found})


@router.get(
    "/agents",
    summary="Agent profiles in TURNSTREAM_AGENTS",
    description="Each profile (DESIGN §11) with what its sessions may use; a file that does "
    "not load is listed with `valid: false` and its problems.",
)
async def list_agents(ctx: Ctx, who: Caller) -> Response:
    who.require("read")
    return json({"items": await asyncio.to_thread(_agents, ctx.settings.agents)})


def _agents(folder: Path) -> list[dict[str, Any]]:
    from turnstream.agents import load_all

    profiles, invalid = load_all(folder)
    out: list[dict[str, Any]] = [{**p.summary(), "valid": True} for p in profiles.values()]
    out += [
        {"name": e.path.stem, "valid": False, "problems": [str(x) for x in e.problems]}
        for e in invalid
    ]
    return sorted(out, key=lambda row: str(row["name"]))


def _workflows(folder: Path, mcp_servers: list[str]) -> list[dict[str, Any]]:
    from turnstream.tools.registry import ToolRegistry
    from turnstream.workflows.loader import WorkflowInvalid, load

    if not folder.is_dir():
        return []
    tools = ToolRegistry.load().names()
    out: list[dict[str, Any]] = []
    for path in sorted(p for p in folder.iterdir() if (p / "workflow.yaml").is_file()):
        try:
            definition = load(path, tools, mcp_servers)
        except WorkflowInvalid as exc:
            out.append({"name": path.name, "valid": False, "problems": exc.errors})
            continue
        out.append({"name": path.name, "valid": True, "definition": definition.to_dict()})
    return out


async def _sessions_kv(ctx: Any) -> Any:
    try:
        return await ctx.bus.key_value(ctx.bus.subjects.sessions_bucket)
    except BucketMissing:
        raise Problem(
            503, "unavailable", "No projection", "the sessions bucket does not exist yet"
        ) from None


async def _summary(kv: Any, session_id: str) -> bytes | None:
    try:
        entry = await kv.get(session_key(session_id))
    except KeyMissing:
        return None
    value: bytes | None = entry.value
    if not value:
        return None
    SessionSummary.from_json(value)  # a value that does not parse is not served
    return value


def _agent(events: list[Any]) -> str | None:
    """The session's agent: its `SessionConfigured`, if a message named one."""
    for event in events:
        if isinstance(event, SessionConfigured):
            return event.data.agent
    return None


def _children(events: list[Any]) -> list[dict[str, Any]]:
    """The sub-turns this session's turns spawned (DESIGN §11), in spawn order, from its
    `SubTurnSpawned` / `SubTurnEnded` / `SubTurnResultDelivered` events."""
    rows: dict[str, dict[str, Any]] = {}
    spawned_at: dict[str, Any] = {}
    for event in events:
        data = event.data
        if isinstance(event, SubTurnSpawned):
            spawned_at[data.invocation_id] = event.time
            rows[data.invocation_id] = {
                "childSessionId": data.child_session_id,
                "agent": data.agent,
                "mode": data.mode,
                "depth": data.depth,
                "task": data.task,
                "parentTurnId": event.turn_id,
                "invocationId": data.invocation_id,
                "status": "running",
                "failureClass": None,
                "childTurnId": None,
                "spawnedAt": event.time.isoformat(),
                "endedAt": None,
                "durationMs": None,
                "deliveredAs": None,
            }
        elif isinstance(event, SubTurnEnded) and data.invocation_id in rows:
            row = rows[data.invocation_id]
            started = spawned_at[data.invocation_id]
            row["status"] = data.status
            row["failureClass"] = data.failure_class
            row["childTurnId"] = data.child_turn_id
            row["endedAt"] = event.time.isoformat()
            row["durationMs"] = round((event.time - started).total_seconds() * 1000)
        elif isinstance(event, SubTurnResultDelivered) and data.invocation_id in rows:
            rows[data.invocation_id]["deliveredAs"] = data.delivered_as
    return list(rows.values())


def _camel(value: Any) -> Any:
    if isinstance(value, dict):
        return {to_camel(k): _camel(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_camel(v) for v in value]
    return value


def spend_row(per_model: dict[str, list[int]], prices: PriceTable) -> dict[str, Any]:
    """Tokens (all input, of it read from the cache, output) and dollars (None: no model
    with a price; `unpriced` names those left out)."""
    s = spend(per_model, prices)
    return {
        "inputTokens": s.tokens.all_input,
        "cacheReadTokens": s.tokens.cache_read,
        "cacheWriteTokens": s.tokens.cache_write,
        "outputTokens": s.tokens.output,
        "usd": round(s.dollars, 6) if s.dollars is not None else None,
        "unpriced": list(s.unpriced),
    }
