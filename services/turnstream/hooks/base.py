"""What a hook is: where it attaches, what it gets, what it may answer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

HookKind = Literal["transform", "guard", "observer"]
HookAction = Literal["continue", "modify", "deny_tool", "abort_turn", "hard_abort"]


class _Wire(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class HookSpec(_Wire):
    """Where a hook attaches. Remote hooks register this (plus `subject`) in the hooks bucket."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    stage: str
    """A turn stage (`TOOL_CALL`, `RENDER`, …), a workflow point (`CheckGate`, `Assert`)
    or `*` for every stage."""
    workflow_stage: str | None = None
    """At `CheckGate` / `Assert`: only for this workflow stage id (None: every stage)."""
    point: Literal["pre", "post"] = "pre"
    kind: HookKind
    priority: int = 100
    """Lower runs first."""
    timeout_ms: int = Field(default=1000, ge=1, le=60_000)
    subject: str | None = None
    """Remote hooks: the NATS request/reply subject that answers `HookCall`s."""


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
    """RECEIVE_INPUT: the input; RENDER: the reply."""
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
    """With `modify` at RECEIVE_INPUT or RENDER: the text to use instead."""
    verdict: Literal["pass", "defer", "block", "ok", "retry", "fail"] | None = None
    """Workflow points: a gate answers pass/defer/block at `CheckGate`, an asserter
    ok/retry/fail at `Assert` (the workflow stage id is in `HookCall.text`)."""


Hook = Callable[[HookCall], Awaitable[HookReply]]
"""An in-process hook: an async callable. Entry points in `turnstream.hooks` name a
`(HookSpec, Hook)` pair or a callable returning a list of them."""
