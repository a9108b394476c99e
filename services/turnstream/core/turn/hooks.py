"""What the shell's hooks answer a turn: the hook points (`HookPoint`) where guard and
transform hooks hold it, and their verdicts (`StageHookVerdict` at a point, `HookVerdict`
on one approved call)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from turnstream.core.events import (
    CompactionChange,
    HookAction,
    RequestChange,
    ResponseChange,
)


class HookPoint(StrEnum):
    """Where guard and transform hooks hold a turn (besides TOOL_CALL pre, per call): each
    just before the event that would move the turn on, which a hook may change or stop.

    The value is the name a hook registers with as its `stage` (with `point` below), except
    TOOL_RESULT, which is `TOOL_CALL` at `post`.
    """

    RECEIVE_INPUT = "RECEIVE_INPUT"
    """pre: the input (rewrite it; stop the turn)."""
    SEND_REQUEST = "SEND_REQUEST"
    """pre, the LLM interceptor: the request (messages, system, model, tools; stop)."""
    STREAM_RESPONSE = "STREAM_RESPONSE"
    """post, the LLM interceptor: the response (replace it; stop) before the turn acts."""
    TOOL_RESULT = "TOOL_RESULT"
    """TOOL_CALL post, the tool interceptor: each executed call's result, before the model
    sees it."""
    COMPACT = "COMPACT"
    """Before a compaction: allow, change (what is dropped, its summary), veto."""
    STOP = "STOP"
    """The turn would end (the model answered without tool calls): one more round?"""
    RENDER = "RENDER"
    """pre: the reply (rewrite it; stop the turn)."""

    @property
    def stage(self) -> str:
        return "TOOL_CALL" if self is HookPoint.TOOL_RESULT else self.value

    @property
    def point(self) -> Literal["pre", "post"]:
        return "post" if self in (HookPoint.STREAM_RESPONSE, HookPoint.TOOL_RESULT) else "pre"


@dataclass(frozen=True)
class StageHookVerdict:
    """What the hooks at a hook point said (the shell runs them, `on_stage_hooks` records)."""

    stage: HookPoint
    action: HookAction
    hook: str = ""
    kind: Literal["transform", "guard", "observer"] = "guard"
    reason: str | None = None
    text: str | None = None
    """RECEIVE_INPUT / RENDER: the text instead; STOP with `iterate`: what the model is told."""
    timed_out: bool = False
    request: RequestChange | None = None
    response: ResponseChange | None = None
    compaction: CompactionChange | None = None
    results: tuple[HookVerdict, ...] = ()
    """TOOL_RESULT: what the hooks said about each executed call's result."""


@dataclass(frozen=True)
class HookVerdict:
    """What the tool hooks said about one approved call (the shell runs them)."""

    invocation_id: str
    action: HookAction
    hook: str = ""
    kind: Literal["transform", "guard", "observer"] = "guard"
    reason: str | None = None
    args: dict[str, Any] | None = None
    timed_out: bool = False
    output: str | None = None
    """TOOL_RESULT with `modify`: the result the model sees instead (`is_error` with it)."""
    is_error: bool | None = None
