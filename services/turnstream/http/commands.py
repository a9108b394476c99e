"""`POST /v1/sessions/{id}/…`: the inbound commands over HTTP (DESIGN §2, §12).

Each body is the command's own fields; `type` and `sessionId` come from the route, the
`idempotencyKey` from the body, else the `Idempotency-Key` header, else a new UUIDv7, and
`sender` defaults to the calling key (`{kind: human, id: "http:<key name>"}`). Fields the
contract does not know are refused with 422 here, as the gateway would.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

import uuid_utils
from fastapi import APIRouter, Header, Path, Query
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel
from starlette.responses import Response

from turnstream.core.commands import (
    MAX_ATTACHMENTS,
    AnswerCommand,
    AttachCommand,
    InterruptCommand,
    MessageCommand,
    SteerCommand,
)
from turnstream.core.events import InteractionAnswered, InteractionRequested, decode
from turnstream.http.auth import Principal
from turnstream.http.context import HttpContext, OnSession
from turnstream.http.problems import Problem, invalid_input
from turnstream.http.submit import submit, wait_bounded

router = APIRouter(prefix="/v1/sessions/{id}", tags=["commands"])

IdempotencyHeader = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description="Used when the body has no idempotencyKey; the same key twice is one command",
    ),
]


class SenderIn(BaseModel):
    kind: Literal["human", "agent"] = "human"
    id: str


class CommandIn(BaseModel):
    """Fields every command takes; more fields of the contract pass through."""

    model_config = ConfigDict(extra="allow", alias_generator=to_camel, populate_by_name=True)

    sender: SenderIn | None = None
    """Defaults to `{kind: human, id: "http:<key name>"}`."""
    chat_id: str | None = None
    """Defaults to the session id."""
    idempotency_key: str | None = None
    """Else the `Idempotency-Key` header, else a new UUIDv7."""

    contract: ClassVar[type[BaseModel]]
    """The command this body becomes: a field it does not take is named at once (else a
    typo'd `txt` would be reported only as a missing `text`)."""

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, value: Any) -> Any:
        if isinstance(value, dict):
            known = {f.alias or n for n, f in cls.contract.model_fields.items()}
            unknown = sorted(k for k in value if k not in known and k not in cls.model_fields)
            if unknown:
                takes = ", ".join(sorted(known - {"type", "sessionId"}))
                name = cls.contract.__name__.removesuffix("Command").lower()
                kind = f"{'an' if name[0] in 'aeiou' else 'a'} {name} command"
                raise ValueError(
                    f"unknown field{'s' if len(unknown) > 1 else ''} "
                    f"{', '.join(map(repr, unknown))}; {kind} takes {takes}"
                )
        return value


class MessageIn(CommandIn):
    contract: ClassVar[type[BaseModel]] = MessageCommand
    text: str
    reply_to: str | None = None
    """Session to deliver the reply to (agent to agent)."""

    @field_validator("text")
    @classmethod
    def _not_blank(cls, text: str) -> str:
        if text and not text.strip():
            raise ValueError("text is only spaces; send some words")
        return text


class SteerIn(MessageIn):
    contract = SteerCommand


class InterruptIn(CommandIn):
    contract = InterruptCommand
    mode: Literal["graceful", "hard"] = "graceful"


class AnswerIn(CommandIn):
    contract = AnswerCommand
    decision: Literal["approve", "deny"]
    reason: str | None = None


class WorkflowIn(CommandIn):
    contract = AttachCommand
    workflow: str
    ctx: dict[str, Any] = Field(default_factory=dict)


class Accepted(BaseModel):
    turnId: str | None
    idempotencyKey: str
    seq: int
    """TS_LOG sequence of the gateway's verdict (stream from here with `?after=`)."""
    event: str
    """`InputAccepted`, `InterruptReceived`, `InteractionAnswered` or `WorkflowAttached`."""
    duplicate: bool
    """True when this key was published before (nothing new was done)."""


PROBLEMS: dict[int | str, dict[str, Any]] = {
    code: {"description": text, "content": {"application/problem+json": {}}}
    for code, text in {
        400: "body is not JSON",
        401: "no or unknown key",
        403: "scope or session not allowed",
        413: "body too large",
        422: "invalid session id, body or command rejected by the gateway",
        504: "no verdict in time, or (`wait`) the turn still runs",
    }.items()
}
ACCEPTED: dict[int | str, dict[str, Any]] = {202: {"model": Accepted}, **PROBLEMS}


def command(
    kind: str,
    session_id: str,
    body: CommandIn,
    who: Principal,
    header_key: str | None,
    *,
    default_key: str | None = None,
) -> dict[str, Any]:
    fields = body.model_dump(by_alias=True, exclude_none=True)
    for name in ("type", "sessionId"):
        given = fields.pop(name, None)
        if given is not None and given != (kind if name == "type" else session_id):
            raise invalid_input(f"{name} {given!r} differs from the route's")
    key = fields.get("idempotencyKey")
    if key and header_key and key != header_key:
        raise invalid_input("idempotencyKey in the body differs from the Idempotency-Key header")
    return {
        "type": kind,
        "sessionId": session_id,
        **fields,
        "chatId": fields.get("chatId") or session_id,
        "sender": fields.get("sender") or {"kind": "human", "id": f"http:{who.name}"},
        "idempotencyKey": key or header_key or default_key or str(uuid_utils.uuid7()),
    }


MULTIPART = {
    "requestBody": {
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["text"],
                    "properties": {
                        **{
                            name: {"type": "string"}
                            for name in ("text", "chatId", "agent", "replyTo", "idempotencyKey")
                        },
                        "files": {
                            "type": "array",
                            "maxItems": MAX_ATTACHMENTS,
                            "items": {"type": "string", "format": "binary"},
                            "description": "The message's attachments: each file part (any "
                            "part with a filename) is streamed into the object store and sent "
                            "as a reference; its Content-Type is its media type (else guessed "
                            "from its name). Refused, naming the file: one over "
                            f"{MAX_ATTACHMENTS}, a type outside TURNSTREAM_ATTACHMENT_TYPES "
                            "(422), one over TURNSTREAM_ATTACHMENT_MAX_BYTES (413)",
                        },
                    },
                },
            }
        }
    }
}
"""The multipart form of the message route (`http.uploads` takes it, before FastAPI)."""


@router.post(
    "/messages",
    status_code=202,
    responses={200: {"description": "`wait=true`: the turn's TurnEnded event"}, **ACCEPTED},
    summary="Send a message (starts a turn, or queues/steers behind the running one)",
    description="The body is the message as JSON, or `multipart/form-data`: its text "
    "fields as parts and up to ten files, each streamed into the object store as it arrives "
    "(docs/http.md, 'Files').",
    openapi_extra=MULTIPART,
)
async def post_message(
    call: OnSession,
    body: MessageIn,
    idempotency_key: IdempotencyHeader = None,
    wait: Annotated[
        bool,
        Query(
            description="Answer 200 with TurnEnded when it ends, or 202 {status: waiting, "
            "interactionId, answer} as soon as it waits on a person's approval"
        ),
    ] = False,
    timeout: Annotated[
        float | None, Query(gt=0, description="Seconds `wait` waits (default 30, max 300)")
    ] = None,
) -> Response:
    ctx, who, session = call.ctx, call.who, call.session
    who.require("send", session)
    cmd = command("message", session, body, who, idempotency_key)
    return await submit(ctx, session, cmd, wait_s=wait_bounded(ctx, timeout) if wait else None)


@router.post("/steer", status_code=202, responses=ACCEPTED, summary="Steer the running turn")
async def post_steer(
    call: OnSession,
    body: SteerIn,
    idempotency_key: IdempotencyHeader = None,
) -> Response:
    ctx, who, session = call.ctx, call.who, call.session
    who.require("send", session)
    return await submit(ctx, session, command("steer", session, body, who, idempotency_key))


@router.post("/interrupt", status_code=202, responses=ACCEPTED, summary="Interrupt the turn")
async def post_interrupt(
    call: OnSession,
    body: InterruptIn,
    idempotency_key: IdempotencyHeader = None,
) -> Response:
    ctx, who, session = call.ctx, call.who, call.session
    who.require("send", session)
    return await submit(ctx, session, command("interrupt", session, body, who, idempotency_key))


@router.post(
    "/answers/{interactionId}",
    status_code=202,
    responses={
        404: {"description": "no such prompt", "content": {"application/problem+json": {}}},
        409: {"description": "answered already", "content": {"application/problem+json": {}}},
        **ACCEPTED,
    },
    summary="Answer an approval prompt (approve or deny)",
)
async def post_answer(
    call: OnSession,
    interaction_id: Annotated[str, Path(alias="interactionId")],
    body: AnswerIn,
    idempotency_key: IdempotencyHeader = None,
) -> Response:
    ctx, who, session = call.ctx, call.who, call.session
    who.require("approve", session)
    cmd = command(
        "answer", session, body, who, idempotency_key, default_key=f"answer-{interaction_id}"
    )
    cmd["interactionId"] = interaction_id
    await _check_prompt(ctx, session, interaction_id, cmd["idempotencyKey"])
    return await submit(ctx, session, cmd)


async def _check_prompt(ctx: HttpContext, session_id: str, interaction_id: str, key: str) -> None:
    """404 for a prompt the session's log never asked; 409 for one answered already by
    another command (the same command again is a retry: it answers as the first did).
    Only the two event types are read, each by its own subject."""
    direct = ctx.hub.direct
    asked = False
    async for record in direct.records(session_id, after=0, kind="InteractionRequested"):
        event = decode(record.data)
        if isinstance(event, InteractionRequested) and event.data.interaction_id == interaction_id:
            asked = True
            break
    if not asked:
        raise Problem(
            404,
            "unknown_interaction",
            "Unknown interaction",
            f"session {session_id} has no prompt {interaction_id!r}; see /v1/approvals",
        )
    answered: str | None = None
    async for record in direct.records(session_id, after=0, kind="InteractionAnswered"):
        event = decode(record.data)
        if isinstance(event, InteractionAnswered) and event.data.interaction_id == interaction_id:
            answered = event.data.idempotency_key
            break
    if answered is not None and answered != key:
        raise Problem(
            409, "answered", "Already answered", f"prompt {interaction_id!r} was answered already"
        )


@router.post("/workflow", status_code=202, responses=ACCEPTED, summary="Attach a workflow")
async def post_workflow(
    call: OnSession,
    body: WorkflowIn,
    idempotency_key: IdempotencyHeader = None,
) -> Response:
    ctx, who, session = call.ctx, call.who, call.session
    who.require("send", session)
    return await submit(ctx, session, command("attach", session, body, who, idempotency_key))
