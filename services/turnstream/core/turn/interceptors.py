"""A turn's hook points (`HookPoint`): where it waits for its guard and transform hooks,
what they see there, and what their answer records.

Each point sits just before the event that would move the turn on; with no hook there,
`decide_turn` emits that event at once (`proceed`). With hooks, the shell runs them and hands
back one `StageHookVerdict`; `intercepted` records what they changed as `HookDecided` (the
log says exactly what changed, so a replay folds the same turn) and then moves on:

    point            waits before               a hook may
    RECEIVE_INPUT    StagePostFired             rewrite the input; stop the turn
    SEND_REQUEST     ProviderRequestStarted     change messages, system, model, tools; stop
    STREAM_RESPONSE  StagePostFired             replace the response; stop
    TOOL_RESULT      StagePostFired(TOOL_CALL)  change each executed call's result; stop
    COMPACT          ContextCompacted           change what is dropped and its summary; veto
    STOP             StagePreFired(RENDER)      ask for one more round (`iterate`)
    RENDER           RenderEmitted              rewrite the reply; stop

(A `StagePostFired` that the next stage's `StagePreFired` follows at once is stored inside
it, as its `previous`: `turnstream.core.events.stages`. The points are the same.)
"""

from __future__ import annotations

from dataclasses import dataclass

from turnstream.core.events import (
    CompactionChange,
    Event,
    HookDecided,
    HookDecidedData,
    Stage,
)
from turnstream.core.fold import Decision
from turnstream.core.turn.builder import Builder
from turnstream.core.turn.evolve import fold
from turnstream.core.turn.hooks import HookPoint, StageHookVerdict
from turnstream.core.turn.onward import would_stop
from turnstream.core.turn.phases import (
    CallingTools,
    ModelFailed,
    Receiving,
    Rendering,
    Requesting,
    Responded,
)
from turnstream.core.turn.provider import ProviderRequest
from turnstream.core.turn.state import (
    ActiveTurn,
    ChatState,
    Context,
    Message,
    ToolCallState,
    TurnConfig,
)
from turnstream.core.turn.steps import (
    compact,
    compaction_cut,
    compose_or_stop,
    compose_request,
    render,
    request_model,
    request_started,
)
from turnstream.core.turn.tool_call import call_decided

CLOSES: dict[HookPoint, Stage] = {
    HookPoint.RECEIVE_INPUT: Stage.RECEIVE_INPUT,
    HookPoint.STREAM_RESPONSE: Stage.STREAM_RESPONSE,
    HookPoint.TOOL_RESULT: Stage.TOOL_CALL,
}
"""The points the turn moves on from by closing a stage (`decide_turn` goes on at once,
`onward`; after the hooks, the decider goes on in the same decision)."""

EXECUTED = frozenset({"succeeded", "failed"})
"""The calls whose results the tool interceptor sees (a denied or skipped call never ran)."""


@dataclass(frozen=True, slots=True)
class HookSubject:
    """What the hooks at a point see."""

    text: str = ""
    """RECEIVE_INPUT: the input; STREAM_RESPONSE, STOP, RENDER: the reply (so far)."""
    request: ProviderRequest | None = None
    model: str = ""
    """SEND_REQUEST: the request as composed, and the model it goes to."""
    response: Message | None = None
    """STREAM_RESPONSE: the model's response."""
    calls: tuple[ToolCallState, ...] = ()
    """TOOL_RESULT: the executed calls, their results in."""
    dropped: tuple[Message, ...] = ()
    """COMPACT: the messages compaction would drop."""


def hook_point(state: ChatState, config: TurnConfig) -> HookPoint | None:
    """The hook point the active turn stands at, hooks registered there or not."""
    turn = state.active
    if turn is None or turn.abort:  # an ended turn, or one awaiting the model: no case below
        return None
    if config.stage is not None and config.stage.act.done:
        return None
    match turn.phase:
        case ModelFailed(open=False) as failed:
            compactable = failed.error.startswith("prompt_too_long") and not turn.compacted
            if compactable and failed.veto is None and compaction_cut(state, turn):
                return HookPoint.COMPACT
        case Receiving(open=True):
            return HookPoint.RECEIVE_INPUT
        case Requesting(open=True) | ModelFailed(stage=Stage.SEND_REQUEST, open=True):
            return HookPoint.SEND_REQUEST
        case Responded(open=True) if turn.round_reply is not None:
            return HookPoint.STREAM_RESPONSE
        case Responded(open=False) if would_stop(turn, config):
            return HookPoint.STOP
        case CallingTools(open=True) if _results_in(turn):
            return HookPoint.TOOL_RESULT
        case Rendering(open=True, rendered=False):
            return HookPoint.RENDER
    return None


def awaiting_stage_hooks(state: ChatState, config: TurnConfig) -> HookPoint | None:
    """The hook point whose hooks the turn waits for, if any (the shell runs them)."""
    point = hook_point(state, config)
    return point if point is not None and point in config.stage_hooks else None


def hook_subject(state: ChatState, config: TurnConfig, point: HookPoint) -> HookSubject:
    turn = state.active
    assert turn is not None
    match point:
        case HookPoint.RECEIVE_INPUT:
            last = next((m for m in reversed(state.history) if m.role == "user"), None)
            return HookSubject(text=last.text if last else "")
        case HookPoint.SEND_REQUEST:
            _, model = request_model(turn, config)
            return HookSubject(request=compose_request(state, config), model=model)
        case HookPoint.STREAM_RESPONSE:
            response = state.history[-1] if state.history else None
            return HookSubject(text=turn.reply, response=response)
        case HookPoint.TOOL_RESULT:
            return HookSubject(calls=tuple(c for c in turn.calls if c.status in EXECUTED))
        case HookPoint.COMPACT:
            return HookSubject(dropped=state.history[: compaction_cut(state, turn)])
        case HookPoint.STOP | HookPoint.RENDER:
            return HookSubject(text=turn.reply)


def proceed(
    point: HookPoint,
    b: Builder,
    state: ChatState,
    config: TurnConfig,
    change: CompactionChange | None = None,
) -> list[Event]:
    """The event(s) that move the turn on from `point`."""
    turn = state.active
    assert turn is not None
    match point:
        case HookPoint.RECEIVE_INPUT | HookPoint.STREAM_RESPONSE | HookPoint.TOOL_RESULT:
            return [b.post(CLOSES[point], "ok")]
        case HookPoint.SEND_REQUEST:
            return request_started(b, state, config)
        case HookPoint.COMPACT:
            return compact(b, state, turn, change)
        case HookPoint.STOP:
            return [b.pre(Stage.RENDER)]
        case HookPoint.RENDER:
            return [render(b, turn, turn.reply)]


def intercepted(
    state: ChatState, verdict: StageHookVerdict, config: TurnConfig, ctx: Context
) -> Decision[ChatState] | None:
    """What the hooks at a point said, recorded, and the turn moved on as they said (with
    the state they fold to); None when the turn does not wait there (a late or repeated
    answer)."""
    point = verdict.stage
    turn = state.active
    if turn is None or awaiting_stage_hooks(state, config) is not point:
        return None
    verdict = _valid(point, verdict)
    b = Builder(state.session_id, turn, ctx)
    decided = _recorded(b, point, verdict)
    after = fold(state, decided)
    assert after.active is not None
    if verdict.action in ("abort_turn", "hard_abort", "veto"):
        # `decide_turn` ends the turn (a veto: as the failed request would have)
        return Decision(tuple(decided), after)
    if verdict.action == "iterate":
        moved = compose_or_stop(b, after.active, config)
    else:
        moved = proceed(point, b, after, config, verdict.compaction)
    return Decision((*decided, *moved), fold(after, moved))


TAKES: dict[HookPoint, frozenset[str]] = {
    HookPoint.RECEIVE_INPUT: frozenset({"modify", "abort_turn", "hard_abort"}),
    HookPoint.SEND_REQUEST: frozenset({"modify", "abort_turn", "hard_abort"}),
    HookPoint.STREAM_RESPONSE: frozenset({"modify", "abort_turn", "hard_abort"}),
    HookPoint.TOOL_RESULT: frozenset({"modify", "abort_turn", "hard_abort"}),
    HookPoint.COMPACT: frozenset({"modify", "veto", "abort_turn", "hard_abort"}),
    HookPoint.STOP: frozenset({"iterate", "abort_turn", "hard_abort"}),
    HookPoint.RENDER: frozenset({"modify", "abort_turn", "hard_abort"}),
}
"""What each point takes besides `continue`."""

CHANGES: dict[HookPoint, str] = {
    HookPoint.RECEIVE_INPUT: "text",
    HookPoint.RENDER: "text",
    HookPoint.SEND_REQUEST: "request",
    HookPoint.STREAM_RESPONSE: "response",
    HookPoint.TOOL_RESULT: "output",
    HookPoint.COMPACT: "compaction",
}
"""What a `modify` carries at each point that takes one (the `HookReply` field)."""


def change_of(point: HookPoint, answer: object) -> object:
    """What a `modify` in `answer` (a hook's reply, the hooks' verdict) carries at `point`."""
    return getattr(answer, CHANGES[point], None) if point in CHANGES else None


def refusal(point: HookPoint, action: str, change: object, text: str | None) -> str | None:
    """Why `point` cannot take this answer (None: it can). `change` is what a `modify`
    carries, `text` what an `iterate` tells the model."""
    if action == "continue":
        return None
    if action not in TAKES[point]:
        return f"`{action}`, which {point.value} does not take"
    if action == "iterate" and not text:
        return "`iterate` without the `text` the model is to be told"
    if action == "modify" and change is None:
        return f"`modify` without `{CHANGES[point]}`"
    return None


def _valid(point: HookPoint, verdict: StageHookVerdict) -> StageHookVerdict:
    """The verdict as the point can take it (the registry refuses the same answers per
    hook; this is the core's own guard): one it cannot take changes nothing."""
    if point is HookPoint.TOOL_RESULT:  # the verdict carries each call's, not one output
        change: object = verdict.results or None
    else:
        change = change_of(point, verdict)
    if refusal(point, verdict.action, change, verdict.text) is not None:
        return StageHookVerdict(point, "continue")
    return verdict


def _recorded(b: Builder, point: HookPoint, verdict: StageHookVerdict) -> list[Event]:
    """`HookDecided` for each change the hooks made (a plain `continue` records nothing)."""
    if point is HookPoint.TOOL_RESULT:
        return [
            call_decided(b, call, "post", output=call.output, is_error=call.is_error)
            for call in verdict.results
            if call.action != "continue"
        ]
    if verdict.action == "continue":
        return []
    data = HookDecidedData(
        hook=verdict.hook,
        kind=verdict.kind,
        stage=point.stage,
        point=point.point,
        action=verdict.action,
        reason=verdict.reason,
        timed_out=verdict.timed_out,
        text=verdict.text,
        request=verdict.request,
        response=verdict.response,
        compaction=verdict.compaction,
    )
    return [b.make(HookDecided, data)]


def _results_in(turn: ActiveTurn) -> bool:
    """Every call of the round is done, and some ran."""
    calls = turn.calls
    if not calls or len(calls) < len(turn.requested_calls):
        return False
    return all(c.done for c in calls) and any(c.status in EXECUTED for c in calls)
