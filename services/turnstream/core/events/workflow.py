"""Workflow events: a state machine attached to a session, its stage executions and its exit.

A stage execution runs as a turn of its own (its `turnId` is the stage execution id): the
turn events of that id make up the stage's transcript, which never joins session history.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from turnstream.core.events.base import EventBase, Sender, WireModel

Verdict = Literal["ok", "retry", "fail", "skip"]


class StageResult(WireModel):
    """What a stage execution leaves in the workflow's state slot (its successors see it)."""

    stage: str
    verdict: Verdict
    reason: str | None = None
    parsed: dict[str, Any] | None = None
    """The completion payload, when one passed the schema."""
    cap_hit: bool = False
    attempt_count: int = 1
    output: dict[str, Any] | None = None
    """What successors read as `ctx.upstream[i].output` (the parsed payload here)."""


class WorkflowAttachedData(WireModel):
    run_id: str
    workflow: str
    definition: dict[str, Any]
    """The whole definition as loaded, so a replay does not depend on the files."""
    ctx: dict[str, Any] = Field(default_factory=dict)
    sender: Sender
    idempotency_key: str
    inbound_seq: int


class WorkflowAttached(EventBase):
    type: Literal["WorkflowAttached"] = "WorkflowAttached"
    data: WorkflowAttachedData


class StageEnteredData(WireModel):
    run_id: str
    stage: str
    stage_execution_id: str
    step: int
    """Index of the workflow step (a parallel group is one step)."""
    siblings: list[str] = Field(default_factory=list)
    """The other stages of its parallel group (they share the compound turn)."""
    recovers: str | None = None
    """The failed stage this `onFail` branch recovers."""
    system: str
    """The stage body rendered at Init: the stage turn's system prompt."""
    upstream: list[StageResult] = Field(default_factory=list)


class StageEntered(EventBase):
    type: Literal["StageEntered"] = "StageEntered"
    data: StageEnteredData


class StageInitFailedData(WireModel):
    run_id: str
    stage: str
    stage_execution_id: str
    step: int
    recovers: str | None = None
    """The failed stage this `onFail` branch was to recover."""
    reason: str
    errors: list[str] = Field(default_factory=list)


class StageInitFailed(EventBase):
    type: Literal["StageInitFailed"] = "StageInitFailed"
    data: StageInitFailedData


class StageCheckGateResultData(WireModel):
    stage: str
    stage_execution_id: str
    outcome: Literal["pass", "defer", "block"]
    gate: str | None = None
    """The gate hook that answered (None: the stage has no gate)."""
    reason: str | None = None
    checks: int = 1
    retry_at: datetime | None = None
    """With `defer`/`block` under `retry-later`: when the gate is asked again."""


class StageCheckGateResult(EventBase):
    type: Literal["StageCheckGateResult"] = "StageCheckGateResult"
    data: StageCheckGateResultData


CompletionOutcome = Literal[
    "accepted", "invalid", "batch_rejected", "no_call", "cap_hit", "interrupted"
]
"""`interrupted`: a graceful interrupt reached the stage mid-Act; its summary round answered
and the Act stops without a completion (the stage is then cancelled)."""


class StageCompletionCheckedData(WireModel):
    """What the completion channel made of one model response of a stage (or of the cap)."""

    stage: str
    stage_execution_id: str
    iteration: int
    outcome: CompletionOutcome
    call_ids: list[str] = Field(default_factory=list)
    """The calls that get `detail` as their result (a rejected batch: all of them)."""
    detail: str | None = None
    """What the model is told (a schema error, the sole-call rule, the steering text)."""
    parsed: dict[str, Any] | None = None


class StageCompletionChecked(EventBase):
    type: Literal["StageCompletionChecked"] = "StageCompletionChecked"
    data: StageCompletionCheckedData


class StageAssertOutcomeData(WireModel):
    stage: str
    stage_execution_id: str
    verdict: Literal["ok", "retry", "fail"]
    reason: str | None = None
    attempt: int
    parsed: dict[str, Any] | None = None
    cap_hit: bool = False
    retry_at: datetime | None = None
    """With `retry`: when Act is entered again (the retry policy's backoff)."""
    asserter: str | None = None
    """The assert hook that answered (None: the default rule)."""


class StageAssertOutcome(EventBase):
    type: Literal["StageAssertOutcome"] = "StageAssertOutcome"
    data: StageAssertOutcomeData


class StageGrantedData(WireModel):
    stage: str
    stage_execution_id: str
    tool: str
    invocation_id: str
    """The call the grant was asked for (and consumed by)."""
    answered_by: Sender | None = None


class StageGranted(EventBase):
    type: Literal["StageGranted"] = "StageGranted"
    data: StageGrantedData


class StageCancelledData(WireModel):
    stage: str
    stage_execution_id: str
    reason: str
    cause: Literal["ParallelSiblingFailure", "interrupted"]


class StageCancelled(EventBase):
    type: Literal["StageCancelled"] = "StageCancelled"
    data: StageCancelledData


class StageExitedData(WireModel):
    stage: str
    stage_execution_id: str
    result: StageResult


class StageExited(EventBase):
    type: Literal["StageExited"] = "StageExited"
    data: StageExitedData


class WorkflowExitData(WireModel):
    run_id: str
    workflow: str
    status: Literal["completed", "failed", "cancelled"]
    reason: str | None = None
    failure: str | None = None
    """`ParallelSiblingFailure`, `StageFailed`, `StageInitFailed` or `interrupted`."""
    results: dict[str, StageResult] = Field(default_factory=dict)
    """The state slot: each stage's last result."""


class WorkflowExit(EventBase):
    type: Literal["WorkflowExit"] = "WorkflowExit"
    data: WorkflowExitData
