"""Hooks in one place: in-process ones from entry points, remote ones from the KV bucket.

Where guards and transforms attach: TOOL_CALL pre (per approved call: deny it, rewrite its
arguments, stop the turn) and the turn's hook points (`HookPoint`, run by `points.py`):
the input, the model request and response (the LLM interceptor), each tool result (the
tool interceptor), a compaction, the turn's stop, the reply. Observers attach anywhere.

Timeout rules (a remote hook that is down counts as timed out):
  observer  ignored
  transform the call goes on unchanged
  guard     on a tool call: the call is denied (safety first); elsewhere: ignored
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from functools import partial
from typing import Any

import orjson
from pydantic import ValidationError

from turnstream.core.session.decider import WorkflowHookSaid
from turnstream.core.turn import (
    HookPoint,
    HookSubject,
    HookVerdict,
    StageHookVerdict,
    ToolCallState,
)
from turnstream.core.workflow.definition import ASSERT, GATE
from turnstream.core.workflow.state import StageRun
from turnstream.entry_points import load_pairs
from turnstream.hooks.base import Hook, HookCall, HookReply, HookSpec
from turnstream.hooks.points import run_point

log = logging.getLogger("turnstream.hooks")
WORKFLOW_POINTS = (GATE, ASSERT)


ENTRY_POINT_GROUP = "turnstream.hooks"


class HookRegistry:
    def __init__(self, local: Iterable[tuple[HookSpec, Hook]] = (), nc: Any = None) -> None:
        self.local: dict[str, tuple[HookSpec, Hook]] = {spec.name: (spec, fn) for spec, fn in local}
        self.remote: dict[str, HookSpec] = {}
        self.nc = nc
        self._refresh()

    def _refresh(self) -> None:
        """Recompute what the hot path asks (every decision asks which hooks exist)."""
        specs = [spec for spec, _ in self.local.values()] + list(self.remote.values())
        self._specs = sorted(specs, key=lambda s: (s.priority, s.name))
        self.has_tool_hooks = bool(self.at("TOOL_CALL", "pre", {"guard", "transform"}))
        self.has_observers = any(s.kind == "observer" for s in self._specs)
        self.stage_hooks: frozenset[HookPoint] = frozenset(
            point for point in HookPoint if self.at_point(point)
        )
        self.workflow_hooks: frozenset[str] = frozenset(
            point for point in WORKFLOW_POINTS if self.at_workflow(point)
        )

    @classmethod
    def load(cls, nc: Any = None, extra: Iterable[tuple[HookSpec, Hook]] = ()) -> HookRegistry:
        """Entry-point hooks plus `extra`."""
        found: list[tuple[HookSpec, Hook]] = [*load_pairs(ENTRY_POINT_GROUP, "hook"), *extra]
        return cls(found, nc)

    def set_remote(self, key: str, value: bytes | None) -> None:
        """Apply one hook's entry of the hooks bucket (None = deleted); `watch_hooks` hands
        the bucket's `context.<name>` entries to the context registry instead."""
        if value is None:
            self.remote.pop(key, None)
            self._refresh()
            return
        try:
            spec = HookSpec.model_validate_json(value)
        except ValidationError as exc:
            log.warning("ignoring remote hook %r: %s", key, exc)
            return
        if not spec.subject:
            log.warning("ignoring remote hook %r: it names no subject", key)
            return
        self.remote[key] = spec
        self._refresh()

    def specs(self) -> list[HookSpec]:
        return list(self._specs)

    def at_workflow(self, point: str) -> list[HookSpec]:
        """The guards registered for a workflow point by name: a `*` hook of the turn
        stages does not turn a gate or an assert into a hook point."""
        return [
            s for s in self._specs if s.kind == "guard" and s.point == "pre" and s.stage == point
        ]

    def at(self, stage: str, point: str, kinds: set[str]) -> list[HookSpec]:
        return [
            s
            for s in self._specs
            if s.kind in kinds and s.point == point and s.stage in (stage, "*")
        ]

    def at_point(self, point: HookPoint) -> list[HookSpec]:
        """The guards and transforms at a hook point. A `*` hook attaches where it always
        did (the input and the reply), not to the points added since."""
        wildcard = point in (HookPoint.RECEIVE_INPUT, HookPoint.RENDER)
        return [
            s
            for s in self._specs
            if s.kind in ("guard", "transform")
            and s.point == point.point
            and (s.stage == point.stage or (wildcard and s.stage == "*"))
        ]

    async def run_stage_hooks(
        self, session_id: str, turn_id: str, point: HookPoint, subject: HookSubject
    ) -> StageHookVerdict:
        """The guards and transforms at a hook point, in priority order (`points.py`)."""
        return await run_point(self, session_id, turn_id, point, subject)

    async def call(self, spec: HookSpec, request: HookCall) -> HookReply | None:
        """One hook call with its timeout; None when it timed out, was down or answered badly."""
        timeout = spec.timeout_ms / 1000
        try:
            if spec.name in self.local and spec.subject is None:
                _, fn = self.local[spec.name]
                async with asyncio.timeout(timeout):
                    return await fn(request)
            if self.nc is None or spec.subject is None:
                return None
            body = request.model_dump_json(by_alias=True).encode()
            msg = await self.nc.request(spec.subject, body, timeout=timeout)
            return HookReply.model_validate(orjson.loads(msg.data))
        except Exception as exc:  # timeout, no responders, a crash or a bad reply
            log.warning("hook %s did not answer (%s): applying its timeout rule", spec.name, exc)
            return None

    async def run_tool_hooks(
        self, session_id: str, turn_id: str, calls: list[ToolCallState]
    ) -> list[HookVerdict]:
        """Guards and transforms at TOOL_CALL pre for each call, in priority order."""
        specs = self.at("TOOL_CALL", "pre", {"guard", "transform"})
        verdicts = []
        for call in calls:
            args, verdict = dict(call.args), None
            for spec in specs:
                request = HookCall(
                    hook=spec.name,
                    session_id=session_id,
                    turn_id=turn_id,
                    stage="TOOL_CALL",
                    point="pre",
                    invocation_id=call.invocation_id,
                    tool=call.tool,
                    args=args,
                )
                reply = await self.call(spec, request)
                if reply is None:
                    if spec.kind == "guard":
                        verdict = HookVerdict(
                            call.invocation_id,
                            "deny_tool",
                            hook=spec.name,
                            kind=spec.kind,
                            reason=f"guard {spec.name} did not answer within {spec.timeout_ms} ms",
                            timed_out=True,
                        )
                        break
                    continue
                if reply.action == "modify" and reply.args is not None:
                    args = reply.args
                    verdict = HookVerdict(
                        call.invocation_id, "modify", spec.name, spec.kind, reply.reason, args
                    )
                elif reply.action in ("deny_tool", "abort_turn", "hard_abort"):
                    verdict = HookVerdict(
                        call.invocation_id, reply.action, spec.name, spec.kind, reply.reason
                    )
                    break
            verdicts.append(verdict or HookVerdict(call.invocation_id, "continue"))
            if verdict is not None and verdict.action in ("abort_turn", "hard_abort"):
                break
        return verdicts

    async def run_workflow_hook(
        self, session_id: str, point: str, stage_id: str, ex: StageRun
    ) -> WorkflowHookSaid:
        """The first gate or asserter for this stage that answers (priority order). One
        that does not answer counts as `defer` at a gate and `fail` at an assert."""
        said = partial(WorkflowHookSaid, ex.execution_id, point)
        for spec in self.at_workflow(point):
            if spec.workflow_stage not in (None, stage_id):
                continue
            request = HookCall(
                hook=spec.name,
                session_id=session_id,
                turn_id=ex.execution_id,
                stage=point,
                point="pre",
                text=stage_id,
                result={"parsed": ex.parsed, "capHit": ex.cap_hit, "attempt": ex.attempt},
            )
            reply = await self.call(spec, request)
            if reply is None:
                silent = "defer" if point == GATE else "fail"
                return said(silent, spec.name, f"{spec.name} did not answer")
            if reply.verdict is not None:
                return said(reply.verdict, spec.name, reply.reason)
        if point == GATE:
            return said("pass")
        default = "ok" if ex.parsed is not None and not ex.cap_hit else "fail"
        return said(default)

    async def observe(self, stage: str, point: str, request: HookCall) -> None:
        """Observers at a stage: their answers and failures change nothing."""
        for spec in self.at(stage, point, {"observer"}):
            await self.call(spec, request.model_copy(update={"hook": spec.name}))
