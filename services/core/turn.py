"""The turn state machine of one session: `evolve` folds events, `decide` says what's next.

    InputAccepted ──► pending ──(no active turn)──► SessionTurnStart
      RECEIVE_INPUT ─► COMPOSE_REQUEST ─► SEND_REQUEST ─► ProviderRequestStarted
                                                   │ the shell calls the provider,
                                                   ▼ then `on_provider_result`
      STREAM_RESPONSE ─┬─ stop = max_tokens, continuation left ─► COMPOSE_REQUEST (bounded)
                       └─ otherwise ─► RENDER ─► TurnEnded{completed} ─► SessionTurnEnd
      provider failure ─► TurnEnded{failed, provider_error} ─► SessionTurnEnd
      iteration bound hit before a model call ─► TurnEnded{failed, limit_exceeded}
    InputAccepted while a turn is active ─► FollowUpQueued (kind=message)
                                         └► SteeringInjected (kind=steer)

The position of a turn is derived from its last stage event, so `decide` continues
a turn from wherever the log left it (after a crash, between two append batches).
Pure: the clock and the id factory come in through `Context`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypeVar, assert_never

from pydantic import TypeAdapter

from turnstream.core.events import (
    AssistantMessage,
    ContextCompacted,
    Event,
    EventBase,
    FailureClass,
    FollowUpQueued,
    FollowUpQueuedData,
    InputAccepted,
    InputRejected,
    InterruptReceived,
    ProviderRequestCompleted,
    ProviderRequestCompletedData,
    ProviderRequestFailed,
    ProviderRequestFailedData,
    ProviderRequestStarted,
    ProviderRequestStartedData,
    ProviderRetry,
    RenderEmitted,
    RenderEmittedData,
    Sender,
    SessionTurnEnd,
    SessionTurnEndData,
    SessionTurnStart,
    SessionTurnStartData,
    Stage,
    StageOutcome,
    StagePostFired,
    StagePostFiredData,
    StagePreFired,
    StagePreFiredData,
    SteeringInjected,
    SteeringInjectedData,
    StopReason,
    TextBlock,
    TurnEnded,
    TurnEndedData,
    TurnStatus,
    Usage,
)
from turnstream.core.ids import IdFactory

E = TypeVar("E", bound=EventBase)

# ---------------------------------------------------------------- state


@dataclass(frozen=True, slots=True)
class Message:
    role: Literal["user", "assistant"]
    text: str


@dataclass(frozen=True)
class PendingInput:
    input_id: str
    turn_id: str
    chat_id: str
    trace_id: str
    correlation_id: str
    kind: Literal["message", "steer"]
    text: str
    sender: Sender
    reply_to: str | None
    queued: bool = False


@dataclass(frozen=True)
class ActiveTurn:
    turn_id: str
    input_id: str
    chat_id: str
    trace_id: str
    correlation_id: str
    reply_to: str | None
    last_event_id: str
    stage: Stage = Stage.RECEIVE_INPUT
    stage_open: bool = True
    iteration: int = 0
    awaiting_provider: bool = False
    provider_error: str | None = None
    """`class: message` of the last failed provider call of this round."""
    stop_reason: StopReason | None = None
    completions: int = 0
    reply: str = ""
    rendered: bool = False
    ended: TurnStatus | None = None
    steering: tuple[str, ...] = ()


@dataclass(frozen=True)
class SessionState:
    """Everything the decider knows about a session; a fold over its log."""

    session_id: str
    pending: tuple[PendingInput, ...] = ()
    active: ActiveTurn | None = None
    history: tuple[Message, ...] = ()
    provider_calls: int = 0
    turns_ended: int = 0
    last_turn_id: str | None = None
    last_status: TurnStatus | None = None


@dataclass(frozen=True, slots=True)
class TurnConfig:
    provider: str = "scripted"
    model: str = "demo"
    max_iterations: int = 50
    max_output_continuations: int = 1
    system_prompt: str | None = None


@dataclass(frozen=True, slots=True)
class Context:
    now: datetime
    new_id: IdFactory
    source: str


# ---------------------------------------------------------------- provider I/O


@dataclass(frozen=True, slots=True)
class ProviderRequest:
    """What the shell hands to a provider."""

    session_id: str
    turn_id: str
    iteration: int
    call_index: int
    system: str | None
    messages: tuple[Message, ...]


@dataclass(frozen=True, slots=True)
class ProviderSuccess:
    text: str
    stop_reason: StopReason
    usage: Usage
    first_byte_at: datetime
    finished_at: datetime


@dataclass(frozen=True, slots=True)
class ProviderFailure:
    error_class: str
    message: str
    retryable: bool
    failed_at: datetime
    status_code: int | None = None


ProviderOutcome = ProviderSuccess | ProviderFailure


# ---------------------------------------------------------------- evolve

S = TypeVar("S")


def _with(obj: S, **changes: Any) -> S:
    """A copy of a frozen dataclass with some fields changed.

    `dataclasses.replace` costs ~10 µs per call on Python 3.11 and a turn makes dozens;
    copying the instance dict costs ~2 µs (bench: python bench/pure_core.py).
    """
    new = object.__new__(type(obj))
    fields = dict(obj.__dict__)
    fields.update(changes)
    object.__setattr__(new, "__dict__", fields)
    return new


def evolve(state: SessionState, event: Event) -> SessionState:
    """Fold one event into the session state."""
    match event:
        case InputAccepted(data=data):
            pending = PendingInput(
                input_id=event.id,
                turn_id=event.turn_id or event.id,
                chat_id=event.chat_id,
                trace_id=event.trace_id,
                correlation_id=event.correlation_id,
                kind=data.kind,
                text=data.text,
                sender=data.sender,
                reply_to=data.reply_to,
            )
            return _with(state, pending=(*state.pending, pending))
        case FollowUpQueued(data=data):
            return _with(
                state,
                pending=tuple(
                    _with(p, queued=True) if p.input_id == data.input_id else p
                    for p in state.pending
                ),
            )
        case SteeringInjected(data=data):
            state = _drop_pending(state, data.input_id)
            if state.active is None:
                return state
            return _turn(state, event, steering=(*state.active.steering, data.text))
        case SessionTurnStart(data=data):
            started = _take_pending(state, data.input_id)
            turn = ActiveTurn(
                turn_id=event.turn_id or data.input_id,
                input_id=data.input_id,
                chat_id=event.chat_id,
                trace_id=event.trace_id,
                correlation_id=event.correlation_id,
                reply_to=started.reply_to if started else None,
                last_event_id=event.id,
                stage_open=False,
            )
            return _with(
                _drop_pending(state, data.input_id),
                active=turn,
                history=(*state.history, Message("user", data.text)),
            )
        case StagePreFired(data=data):
            if not _is_active(state, event):
                return state
            assert state.active is not None
            if data.stage is Stage.COMPOSE_REQUEST and state.active.steering:
                steered = tuple(Message("user", text) for text in state.active.steering)
                state = _with(state, history=state.history + steered)
                state = _turn(state, event, steering=())
            return _turn(state, event, stage=data.stage, stage_open=True, iteration=data.iteration)
        case StagePostFired(data=data):
            return _turn(state, event, stage=data.stage, stage_open=False)
        case ProviderRequestStarted():
            if not _is_active(state, event):
                return state
            state = _with(state, provider_calls=state.provider_calls + 1)
            return _turn(state, event, awaiting_provider=True, provider_error=None)
        case ProviderRequestCompleted(data=data):
            if not _is_active(state, event):
                return state
            assert state.active is not None
            turn, text = state.active, data.message.text
            state = _with(state, history=(*state.history, Message("assistant", text)))
            return _turn(
                state,
                event,
                awaiting_provider=False,
                stop_reason=data.stop_reason,
                reply=turn.reply + text,
                completions=turn.completions + 1,
            )
        case ProviderRequestFailed(data=data):
            error = f"{data.error_class}: {data.message}"
            return _turn(state, event, awaiting_provider=False, provider_error=error)
        case RenderEmitted():
            return _turn(state, event, rendered=True)
        case TurnEnded(data=data):
            if not _is_active(state, event):
                return state  # e.g. the gateway's terminal event for rejected input
            return _turn(state, event, ended=data.status)
        case SessionTurnEnd(data=data):
            if not _is_active(state, event):
                return state
            assert state.active is not None
            leftover = tuple(Message("user", text) for text in state.active.steering)
            return _with(
                state,
                active=None,
                history=state.history + leftover,
                turns_ended=state.turns_ended + 1,
                last_turn_id=state.active.turn_id,
                last_status=data.status,
            )
        case InputRejected() | InterruptReceived() | ProviderRetry() | ContextCompacted():
            return state
        case _:
            assert_never(event)


def _is_active(state: SessionState, event: EventBase) -> bool:
    return state.active is not None and state.active.turn_id == event.turn_id


def _turn(state: SessionState, event: EventBase, **changes: object) -> SessionState:
    if not _is_active(state, event):
        return state
    assert state.active is not None
    return _with(state, active=_with(state.active, last_event_id=event.id, **changes))


def _take_pending(state: SessionState, input_id: str) -> PendingInput | None:
    return next((p for p in state.pending if p.input_id == input_id), None)


def _drop_pending(state: SessionState, input_id: str) -> SessionState:
    return _with(state, pending=tuple(p for p in state.pending if p.input_id != input_id))


def fold(state: SessionState, events: list[Event]) -> SessionState:
    """Fold many events."""
    for event in events:
        state = evolve(state, event)
    return state


# ---------------------------------------------------------------- decide


def decide(state: SessionState, config: TurnConfig, ctx: Context) -> list[Event]:
    """Every event that follows from `state` without an outside effect, in order.

    Stops when nothing is left to do or the turn waits for the provider.
    """
    out: list[Event] = []
    while step := _next_step(state, config, ctx):
        out.extend(step)
        state = fold(state, step)
    return out


def needs_provider_call(state: SessionState) -> bool:
    """True when the active turn waits for a provider response the shell must fetch."""
    return state.active is not None and state.active.awaiting_provider


def compose_request(state: SessionState, config: TurnConfig) -> ProviderRequest:
    """The provider request for the active turn, built from the session history."""
    turn = state.active
    assert turn is not None, "compose_request needs an active turn"
    return ProviderRequest(
        session_id=state.session_id,
        turn_id=turn.turn_id,
        iteration=turn.iteration,
        call_index=state.provider_calls - 1,
        system=config.system_prompt,
        messages=state.history,
    )


def on_provider_result(
    state: SessionState, outcome: ProviderOutcome, config: TurnConfig, ctx: Context
) -> list[Event]:
    """The events that record a provider outcome, then whatever follows from them."""
    turn = state.active
    if turn is None or not turn.awaiting_provider:
        return []  # a late result for a turn that moved on: nothing to record
    b = _Builder(state.session_id, turn, ctx)
    events: list[Event] = []
    match outcome:
        case ProviderSuccess():
            if turn.stage is Stage.SEND_REQUEST and turn.stage_open:
                events.append(b.post(Stage.SEND_REQUEST, "ok", outcome.first_byte_at))
            if not (turn.stage is Stage.STREAM_RESPONSE and turn.stage_open):
                events.append(b.pre(Stage.STREAM_RESPONSE, outcome.first_byte_at))
            message = AssistantMessage(content=[TextBlock(text=outcome.text)])
            data = ProviderRequestCompletedData(
                message=message,
                usage=outcome.usage,
                stop_reason=outcome.stop_reason,
                iteration=turn.iteration,
            )
            events.append(b.make(ProviderRequestCompleted, data, outcome.finished_at))
            events.append(b.post(Stage.STREAM_RESPONSE, "ok", outcome.finished_at))
        case ProviderFailure():
            failed = ProviderRequestFailedData(
                error_class=outcome.error_class,
                message=outcome.message,
                retryable=outcome.retryable,
                status_code=outcome.status_code,
                iteration=turn.iteration,
            )
            events.append(b.make(ProviderRequestFailed, failed, outcome.failed_at))
            if turn.stage_open:
                events.append(b.post(turn.stage, "failed", outcome.failed_at))
        case _:
            assert_never(outcome)
    state = fold(state, events)
    return events + decide(state, config, ctx)


def _next_step(state: SessionState, config: TurnConfig, ctx: Context) -> list[Event]:
    turn = state.active
    if turn is None:
        return _start_turn(state, ctx)
    waiting = [p for p in state.pending if not p.queued]
    if waiting:
        return [_park(state.session_id, turn, p, ctx) for p in waiting]
    b = _Builder(state.session_id, turn, ctx)
    if turn.ended is not None:
        return [b.make(SessionTurnEnd, SessionTurnEndData(status=turn.ended))]
    if turn.awaiting_provider:
        return []
    stage, is_open = turn.stage, turn.stage_open
    if turn.provider_error and not is_open:
        return [
            b.end(
                "failed",
                FailureClass.PROVIDER_ERROR,
                reason=f"the model provider failed ({turn.provider_error})",
                next_action="send the message again; if it keeps failing, check the "
                "provider's status and TURNSTREAM_PROVIDER / TURNSTREAM_BASE_URL",
            )
        ]
    match stage, is_open:
        case Stage.RECEIVE_INPUT, True:
            return [b.post(stage, "ok")]
        case Stage.RECEIVE_INPUT, False:
            return _compose_or_stop(b, turn, config)
        case Stage.COMPOSE_REQUEST, True:
            return [b.post(stage, "ok")]
        case Stage.COMPOSE_REQUEST, False:
            return [b.pre(Stage.SEND_REQUEST)]
        case Stage.SEND_REQUEST, True:
            data = ProviderRequestStartedData(
                provider=config.provider,
                model=config.model,
                iteration=turn.iteration,
                call_index=state.provider_calls,
                message_count=len(state.history),
            )
            return [b.make(ProviderRequestStarted, data)]
        case Stage.STREAM_RESPONSE, False:
            wants_more = turn.stop_reason == "max_tokens"
            if wants_more and turn.completions <= config.max_output_continuations:
                return _compose_or_stop(b, turn, config)
            return [b.pre(Stage.RENDER)]
        case Stage.RENDER, True:
            if not turn.rendered:
                render = RenderEmittedData(text=turn.reply, reply_to=turn.reply_to)
                return [b.make(RenderEmitted, render)]
            return [b.post(stage, "ok")]
        case Stage.RENDER, False:
            return [b.end("completed", reply=turn.reply)]
        case _:
            # SEND_REQUEST closed without a result or STREAM_RESPONSE left open: the
            # response was lost (a crash between batches). Ask the provider again.
            return [b.pre(Stage.SEND_REQUEST)]


def _compose_or_stop(b: _Builder, turn: ActiveTurn, config: TurnConfig) -> list[Event]:
    if turn.iteration >= config.max_iterations:
        return [
            b.end(
                "failed",
                FailureClass.LIMIT_EXCEEDED,
                reason=f"the turn reached maxIterations={config.max_iterations} model calls",
                next_action="prior steps of this turn may have completed; send a follow-up "
                "to continue, or raise TURNSTREAM_MAX_ITERATIONS",
            )
        ]
    return [b.pre(Stage.COMPOSE_REQUEST, iteration=turn.iteration + 1)]


def _start_turn(state: SessionState, ctx: Context) -> list[Event]:
    if not state.pending:
        return []
    nxt = state.pending[0]
    b = _Builder(
        state.session_id,
        ActiveTurn(
            turn_id=nxt.turn_id,
            input_id=nxt.input_id,
            chat_id=nxt.chat_id,
            trace_id=nxt.trace_id,
            correlation_id=nxt.correlation_id,
            reply_to=nxt.reply_to,
            last_event_id=nxt.input_id,
        ),
        ctx,
    )
    data = SessionTurnStartData(input_id=nxt.input_id, text=nxt.text, sender=nxt.sender)
    return [b.make(SessionTurnStart, data), b.pre(Stage.RECEIVE_INPUT)]


def _park(session_id: str, turn: ActiveTurn, pending: PendingInput, ctx: Context) -> Event:
    """An input that arrived during a turn: steer it in, or queue it for the next turn."""
    ids = _with(
        turn,
        turn_id=pending.turn_id,
        chat_id=pending.chat_id,
        trace_id=pending.trace_id,
        correlation_id=pending.correlation_id,
        last_event_id=pending.input_id,
    )
    b = _Builder(session_id, ids, ctx)
    if pending.kind == "steer":
        steer = SteeringInjectedData(input_id=pending.input_id, text=pending.text)
        return b.make(SteeringInjected, steer, turn_id=turn.turn_id)
    queued = FollowUpQueuedData(input_id=pending.input_id, behind_turn_id=turn.turn_id)
    return b.make(FollowUpQueued, queued)


@dataclass(slots=True)
class _Builder:
    """Stamps envelopes for one turn's events, chaining causation ids."""

    session_id: str
    turn: ActiveTurn
    ctx: Context
    last_id: str = field(init=False)

    def __post_init__(self) -> None:
        self.last_id = self.turn.last_event_id

    def make(
        self,
        cls: type[E],
        data: Any,
        at: datetime | None = None,
        *,
        turn_id: str | None = None,
    ) -> E:
        event = cls(  # type: ignore[call-arg]
            id=self.ctx.new_id(),
            time=at or self.ctx.now,
            session_id=self.session_id,
            chat_id=self.turn.chat_id,
            turn_id=turn_id or self.turn.turn_id,
            trace_id=self.turn.trace_id,
            correlation_id=self.turn.correlation_id,
            causation_id=self.last_id,
            source=self.ctx.source,
            data=data,
        )
        self.last_id = event.id
        return event

    def pre(self, stage: Stage, at: datetime | None = None, *, iteration: int = 0) -> Event:
        it = iteration or self.turn.iteration
        return self.make(StagePreFired, StagePreFiredData(stage=stage, iteration=it), at)

    def post(self, stage: Stage, outcome: StageOutcome, at: datetime | None = None) -> Event:
        data = StagePostFiredData(stage=stage, iteration=self.turn.iteration, outcome=outcome)
        return self.make(StagePostFired, data, at)

    def end(
        self,
        status: TurnStatus,
        failure: FailureClass | None = None,
        *,
        reason: str | None = None,
        next_action: str | None = None,
        reply: str | None = None,
    ) -> Event:
        data = TurnEndedData(
            status=status,
            failure_class=failure,
            reason=reason,
            next_action=next_action,
            reply=reply,
            iterations=self.turn.iteration,
        )
        return self.make(TurnEnded, data)


_STATE_ADAPTER: TypeAdapter[SessionState] = TypeAdapter(SessionState)


def state_to_json(state: SessionState) -> bytes:
    """The session state as JSON (the runner's status API, snapshots, comparisons)."""
    return _STATE_ADAPTER.dump_json(state)


def state_from_json(data: bytes) -> SessionState:
    return _STATE_ADAPTER.validate_json(data)
