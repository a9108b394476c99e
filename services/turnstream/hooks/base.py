"""What a hook is: where it attaches, what it gets, what it may answer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from turnstream.core.events import (
    CompactionChange,
    HistoryMessage,
    HookAction,
    RequestChange,
    ResponseChange,
)

HookKind = Literal["transform", "guard", "observer"]


class _Wire(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class HookSpec(_Wire):
    """Where a hook attaches. Remote hooks register this (plus `subject`) in the hooks bucket."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    stage: str
    """A turn stage (`TOOL_CALL`, `RENDER`, …), `COMPACT` (before a compaction), `STOP`
    (the turn would end), a workflow point (`CheckGate`, `Assert`) or `*`: every stage for
    an observer, RECEIVE_INPUT / TOOL_CALL / RENDER `pre` for a guard or transform."""
    workflow_stage: str | None = None
    """At `CheckGate` / `Assert`: only for this workflow stage id (None: every stage)."""
    point: Literal["pre", "post"] = "pre"
    kind: HookKind
    priority: int = 100
    """Lower runs first."""
    timeout_ms: int = Field(default=1000, ge=1, le=60_000)
    subject: str | None = None
    """Remote hooks: the NATS request/reply subject that answers `HookCall`s."""


class RequestView(_Wire):
    """SEND_REQUEST pre: the model request as composed."""

    model: str
    system: str | None
    messages: list[HistoryMessage]
    tools: list[str]
    iteration: int


class CompactionView(_Wire):
    """COMPACT: what compaction would drop (the oldest messages before this turn)."""

    dropped_messages: int
    messages: list[HistoryMessage]


class HookCall(_Wire):
    """What a hook receives (JSON over NATS for remote hooks)."""

    hook: str
    session_id: str
    turn_id: str | None
    stage: str
    point: Literal["pre", "post"]
    invocation_id: str | None = None
    tool: str | None = None
    args: dict[str, Any] | None = None
    text: str | None = None
    """RECEIVE_INPUT: the input; STREAM_RESPONSE, STOP, RENDER: the reply (so far)."""
    request: RequestView | None = None
    """SEND_REQUEST pre: the request the model is about to get."""
    response: ResponseChange | None = None
    """STREAM_RESPONSE post: the model's response (its text and tool calls)."""
    output: str | None = None
    """TOOL_CALL post: the call's result (with `tool`, `args`, `invocationId`)."""
    is_error: bool | None = None
    compaction: CompactionView | None = None
    """COMPACT: what compaction would drop."""
    event: dict[str, Any] | None = None
    """Observers: the stage event itself."""
    result: dict[str, Any] | None = None
    """`CheckGate` and `Assert`: what the stage has so far (`parsed`, `capHit`, `attempt`)."""


class HookReply(_Wire):
    """What a hook answers. Observers' answers are ignored."""

    action: HookAction = "continue"
    reason: str | None = None
    args: dict[str, Any] | None = None
    """With `modify` at TOOL_CALL: the arguments to use instead."""
    text: str | None = None
    """With `modify` at RECEIVE_INPUT or RENDER: the text to use instead; with `iterate` at
    STOP: what the model is told before it answers again."""
    request: RequestChange | None = None
    """With `modify` at SEND_REQUEST: what to send instead (fields left out stay as they are)."""
    response: ResponseChange | None = None
    """With `modify` at STREAM_RESPONSE: the response to go on with instead."""
    output: str | None = None
    """With `modify` at TOOL_CALL post: the result the model sees instead."""
    is_error: bool | None = None
    compaction: CompactionChange | None = None
    """With `modify` at COMPACT: how many messages to drop, and/or a summary of them."""
    verdict: Literal["pass", "defer", "block", "ok", "retry", "fail"] | None = None
    """Workflow points: a gate answers pass/defer/block at `CheckGate`, an asserter
    ok/retry/fail at `Assert` (the workflow stage id is in `HookCall.text`)."""


Hook = Callable[[HookCall], Awaitable[HookReply]]
"""An in-process hook: an async callable. Entry points in `turnstream.hooks` name a
`(HookSpec, Hook)` pair or a callable returning a list of them."""
