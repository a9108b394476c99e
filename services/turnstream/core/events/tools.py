"""Tool events: a call proposed, judged (mode, prompt, hook), requested, run and its result."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from turnstream.core.events.base import EventBase, FailureClass, Sender, WireModel
from turnstream.core.events.provider import ToolUseBlock

SecurityMode = Literal["auto", "ask", "allowlist", "deny"]
Authority = Literal["mode", "allowlist", "interaction", "hook", "workflow"]


class StageEnvelope(WireModel):
    """The workflow stage a call is made in: its tools are approved by the workflow."""

    run_id: str
    stage: str
    stage_execution_id: str
    allowed_tools: list[str]


class ToolInvocationProposedData(WireModel):
    invocation_id: str
    """Our id of this invocation (claims, results and approvals refer to it)."""
    call_id: str
    """The provider's id of the tool call (tool results must echo it)."""
    tool: str
    args: dict[str, Any]
    index: int
    """Position of the call in the model's response (calls are handled in this order)."""
    iteration: int
    read_only: bool
    known: bool = True
    """False when no such tool exists: the runner fails the call itself, nobody approves it."""
    skip: str | None = None
    """Why the runner will not run this call (a graceful interrupt); nobody approves it."""
    envelope: StageEnvelope | None = None
    """Set inside a workflow stage: the approval service applies the stage's envelope."""


class ToolInvocationProposed(EventBase):
    type: Literal["ToolInvocationProposed"] = "ToolInvocationProposed"
    data: ToolInvocationProposedData


class ToolCallModeInvokedData(WireModel):
    invocation_id: str
    mode: SecurityMode
    """The session's security mode (fixed at its first proposal)."""
    verdict: Literal["approve", "deny", "ask"]


class ToolCallModeInvoked(EventBase):
    type: Literal["ToolCallModeInvoked"] = "ToolCallModeInvoked"
    data: ToolCallModeInvokedData


class ToolCallApprovedData(WireModel):
    invocation_id: str
    authority: Authority
    answered_by: Sender | None = None
    reason: str | None = None


class ToolCallApproved(EventBase):
    type: Literal["ToolCallApproved"] = "ToolCallApproved"
    data: ToolCallApprovedData


class ToolCallDeniedData(WireModel):
    invocation_id: str
    authority: Authority
    reason: str
    timed_out: bool = False
    answered_by: Sender | None = None


class ToolCallDenied(EventBase):
    type: Literal["ToolCallDenied"] = "ToolCallDenied"
    data: ToolCallDeniedData


class InteractionRequestedData(WireModel):
    interaction_id: str
    invocation_id: str
    tool: str
    args: dict[str, Any]
    deadline: datetime
    """Unanswered by then, the call is denied (`timedOut`)."""
    prompt: str
    kind: Literal["tool", "grantStageTool"] = "tool"
    """`grantStageTool`: a workflow stage asks to run a tool outside its envelope."""


class InteractionRequested(EventBase):
    type: Literal["InteractionRequested"] = "InteractionRequested"
    data: InteractionRequestedData


class InteractionAnsweredData(WireModel):
    interaction_id: str
    decision: Literal["approve", "deny"]
    reason: str | None = None
    sender: Sender
    idempotency_key: str
    inbound_seq: int


class InteractionAnswered(EventBase):
    type: Literal["InteractionAnswered"] = "InteractionAnswered"
    data: InteractionAnsweredData


class ToolInvocationRequestedData(WireModel):
    invocation_id: str
    call_id: str
    tool: str
    args: dict[str, Any]
    read_only: bool
    idempotent: bool
    timeout_ms: int
    iteration: int


class ToolInvocationRequested(EventBase):
    type: Literal["ToolInvocationRequested"] = "ToolInvocationRequested"
    data: ToolInvocationRequestedData


class ToolInvocationStartedData(WireModel):
    invocation_id: str
    attempt: int = 1


class ToolInvocationStarted(EventBase):
    type: Literal["ToolInvocationStarted"] = "ToolInvocationStarted"
    data: ToolInvocationStartedData


class ToolInvocationSucceededData(WireModel):
    invocation_id: str
    output: str
    """What the model sees: the result, cut to the result budget."""
    truncated: bool = False
    size: int
    """Bytes of the full result."""
    blob: str | None = None
    """Object-store key of the full result when it was truncated."""
    duration_ms: float


class ToolInvocationSucceeded(EventBase):
    type: Literal["ToolInvocationSucceeded"] = "ToolInvocationSucceeded"
    data: ToolInvocationSucceededData


class ToolError(WireModel):
    error_class: FailureClass = Field(alias="class")
    kind: str
    """e.g. `invalid_arguments`, `unknown_tool`, `path_escape`, `timeout`, `interrupted`."""
    detail: str


class ToolInvocationFailedData(WireModel):
    invocation_id: str
    error: ToolError
    may_have_run: bool = False
    """True when the tool may have had effects before it failed (e.g. a crash mid-run)."""
    duration_ms: float = 0.0


class ToolInvocationFailed(EventBase):
    type: Literal["ToolInvocationFailed"] = "ToolInvocationFailed"
    data: ToolInvocationFailedData


class ToolInvocationCancelledData(WireModel):
    invocation_id: str
    reason: str


class ToolInvocationCancelled(EventBase):
    type: Literal["ToolInvocationCancelled"] = "ToolInvocationCancelled"
    data: ToolInvocationCancelledData


HookAction = Literal[
    "continue", "modify", "deny_tool", "abort_turn", "hard_abort", "veto", "iterate"
]
"""`veto`: a compaction interceptor refuses the compaction; `iterate`: a stop hook asks
the model for one more round (its `text` is what the model is told)."""


class HistoryMessage(WireModel):
    """One message of a model request, as an LLM interceptor sees and rewrites it."""

    role: Literal["user", "assistant", "tool"]
    text: str
    tool_calls: list[ToolUseBlock] = Field(default_factory=list)
    tool_call_id: str | None = None
    is_error: bool = False


class RequestChange(WireModel):
    """An LLM interceptor's change to one model request (SEND_REQUEST pre); None: as is."""

    model: str | None = None
    system: str | None = None
    messages: list[HistoryMessage] | None = None
    tools: list[str] | None = None
    """The offered tools' names to keep (a subset of what was offered, in any order)."""


class ResponseChange(WireModel):
    """An LLM interceptor's replacement of a model response (STREAM_RESPONSE post)."""

    text: str
    tool_calls: list[ToolUseBlock] = Field(default_factory=list)


class CompactionChange(WireModel):
    """A compaction interceptor's change: how many messages to drop, and a summary of them."""

    dropped_messages: int | None = None
    summary: str | None = None


class HookDecidedData(WireModel):
    hook: str
    kind: Literal["transform", "guard", "observer"]
    stage: str
    """A turn stage, or `COMPACT` / `STOP` (the compaction interceptor, the stop hook)."""
    point: Literal["pre", "post"]
    action: HookAction
    reason: str | None = None
    invocation_id: str | None = None
    timed_out: bool = False
    args: dict[str, Any] | None = None
    """The arguments after a `modify` of a tool call."""
    text: str | None = None
    """The input (RECEIVE_INPUT) or reply (RENDER) text after a `modify`; with `iterate`
    at STOP, what the model is told."""
    request: RequestChange | None = None
    """SEND_REQUEST pre: what the request carries instead (the rest as composed)."""
    response: ResponseChange | None = None
    """STREAM_RESPONSE post: the response the turn goes on with."""
    output: str | None = None
    """TOOL_CALL post: the result the model sees instead (`isError` with it)."""
    is_error: bool | None = None
    compaction: CompactionChange | None = None


class HookDecided(EventBase):
    """A hook changed the turn (only decisions that change something are recorded)."""

    type: Literal["HookDecided"] = "HookDecided"
    data: HookDecidedData
