"""Running the guards and transforms at a turn's hook points (`HookPoint`).

Each hook sees what the turn holds there (`HookCall`: the input, the model request, its
response, a tool result, what compaction would drop, the reply) as the hooks before it
left it, and answers `continue`, `modify` (with what to use instead), `abort_turn` /
`hard_abort`, `veto` (COMPACT) or `iterate` (STOP, with what the model is told). The first
stop, veto or iterate wins; changes add up. An answer a point cannot take is logged and
changes nothing; a hook that does not answer in time changes nothing either (the call has
run, the request is the turn's own: nothing is safer to refuse than to let through).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from turnstream.core.events import RequestChange, ResponseChange
from turnstream.core.turn import HookPoint, HookSubject, HookVerdict, StageHookVerdict
from turnstream.core.turn.interceptors import change_of, refusal
from turnstream.core.turn.steps import history_message
from turnstream.hooks.base import CompactionView, HookCall, HookReply, HookSpec, RequestView

log = logging.getLogger("turnstream.hooks")


class HookRegistry(Protocol):
    """What running a point needs of the registry (`turnstream.hooks.registry`)."""

    def at_point(self, point: HookPoint) -> list[HookSpec]: ...

    async def call(self, spec: HookSpec, request: HookCall) -> HookReply | None: ...


async def run_point(
    registry: HookRegistry,
    session_id: str,
    turn_id: str,
    point: HookPoint,
    subject: HookSubject,
) -> StageHookVerdict:
    if point is HookPoint.TOOL_RESULT:
        return await _run_result_hooks(registry, session_id, turn_id, subject)
    call = _call(session_id, turn_id, point, subject)
    verdict = StageHookVerdict(point, "continue")
    for spec in registry.at_point(point):
        reply = await registry.call(spec, call.model_copy(update={"hook": spec.name}))
        if reply is None or reply.action == "continue" or not _takes(spec.name, point, reply):
            continue
        said: dict[str, Any] = {"hook": spec.name, "kind": spec.kind, "reason": reply.reason}
        if reply.action != "modify":
            return StageHookVerdict(point, reply.action, text=reply.text, **said)
        verdict, call = _modified(point, verdict, call, reply, said)
    return verdict


def _takes(hook: str, point: HookPoint, reply: HookReply) -> bool:
    """Whether `point` can take this answer; logged when it cannot (it changes nothing)."""
    problem = refusal(point, reply.action, change_of(point, reply), reply.text)
    if problem is not None:
        log.warning("hook %s answered %s at %s: ignored", hook, problem, point.value)
    return problem is None


def _modified(
    point: HookPoint,
    verdict: StageHookVerdict,
    call: HookCall,
    reply: HookReply,
    said: dict[str, Any],
) -> tuple[StageHookVerdict, HookCall]:
    """The verdict with this hook's change added, and what the next hook sees."""
    match point:
        case HookPoint.RECEIVE_INPUT | HookPoint.RENDER:
            changed = StageHookVerdict(point, "modify", text=reply.text, **said)
            return changed, call.model_copy(update={"text": reply.text})
        case HookPoint.SEND_REQUEST:
            assert reply.request is not None and call.request is not None
            request = _merged(verdict.request, reply.request, call.request)
            view = _view(request, call.request)
            changed = StageHookVerdict(point, "modify", request=request, **said)
            return changed, call.model_copy(update={"request": view})
        case HookPoint.STREAM_RESPONSE:
            response = reply.response
            assert response is not None
            changed = StageHookVerdict(point, "modify", response=response, **said)
            return changed, call.model_copy(update={"response": response})
        case HookPoint.COMPACT:
            change = reply.compaction
            assert change is not None
            if verdict.compaction is not None:
                earlier = verdict.compaction.model_dump(exclude_none=True)
                change = change.model_copy(
                    update={**earlier, **change.model_dump(exclude_none=True)}
                )
            return StageHookVerdict(point, "modify", compaction=change, **said), call
    return verdict, call


def _merged(
    before: RequestChange | None, change: RequestChange, view: RequestView
) -> RequestChange:
    """Changes of several hooks add up; tool names the request does not offer are dropped
    (a hook can narrow the tool list, not invent a tool)."""
    fields = before.model_dump(exclude_none=True) if before is not None else {}
    fields.update(change.model_dump(exclude_none=True))
    if change.tools is not None:
        unknown = [t for t in change.tools if t not in view.tools]
        if unknown:
            log.warning("hook asked to offer tools the request does not have: %s", unknown)
        fields["tools"] = [t for t in change.tools if t in view.tools]
    return RequestChange.model_validate(fields)


def _view(request: RequestChange, view: RequestView) -> RequestView:
    """The request as the next hook sees it: the view with the changes so far."""
    changes = request.model_dump(exclude_none=True)
    return RequestView.model_validate({**view.model_dump(), **changes})


def _call(session_id: str, turn_id: str, point: HookPoint, subject: HookSubject) -> HookCall:
    base = HookCall(
        hook="",
        session_id=session_id,
        turn_id=turn_id,
        stage=point.stage,
        point=point.point,
        text=subject.text or None,
    )
    match point:
        case HookPoint.SEND_REQUEST:
            request = subject.request
            assert request is not None
            view = RequestView(
                model=subject.model,
                system=request.system,
                messages=[history_message(m) for m in request.messages],
                tools=[t.name for t in request.tools],
                iteration=request.iteration,
            )
            return base.model_copy(update={"request": view})
        case HookPoint.STREAM_RESPONSE if subject.response is not None:
            calls = [c.block() for c in subject.response.tool_calls]
            response = ResponseChange(text=subject.response.text, tool_calls=calls)
            return base.model_copy(update={"response": response})
        case HookPoint.COMPACT:
            dropped = [history_message(m) for m in subject.dropped]
            compaction = CompactionView(dropped_messages=len(dropped), messages=dropped)
            return base.model_copy(update={"compaction": compaction})
    return base


async def _run_result_hooks(
    registry: HookRegistry, session_id: str, turn_id: str, subject: HookSubject
) -> StageHookVerdict:
    """The tool interceptor: each executed call's result through the hooks, in call order."""
    specs = registry.at_point(HookPoint.TOOL_RESULT)
    said: list[HookVerdict] = []
    for call in subject.calls:
        output, is_error, verdict = call.result, call.is_error, None
        for spec in specs:
            request = HookCall(
                hook=spec.name,
                session_id=session_id,
                turn_id=turn_id,
                stage="TOOL_CALL",
                point="post",
                invocation_id=call.invocation_id,
                tool=call.tool,
                args=call.args,
                output=output,
                is_error=is_error,
            )
            reply = await registry.call(spec, request)
            if reply is None or reply.action == "continue":
                continue
            if not _takes(spec.name, HookPoint.TOOL_RESULT, reply):
                continue
            if reply.action == "modify":
                assert reply.output is not None
                output = reply.output
                is_error = reply.is_error if reply.is_error is not None else is_error
                verdict = HookVerdict(
                    call.invocation_id,
                    "modify",
                    spec.name,
                    spec.kind,
                    reply.reason,
                    output=output,
                    is_error=is_error,
                )
                continue
            stop = HookVerdict(call.invocation_id, reply.action, spec.name, spec.kind, reply.reason)
            said += [*([verdict] if verdict else []), stop]
            return StageHookVerdict(
                HookPoint.TOOL_RESULT,
                stop.action,
                spec.name,
                spec.kind,
                reply.reason,
                results=tuple(said),
            )
        if verdict is not None:
            said.append(verdict)
    return StageHookVerdict(
        HookPoint.TOOL_RESULT, "modify" if said else "continue", results=tuple(said)
    )
