"""Where a turn stands (`ActiveTurn.phase`): one of a few types, each holding what is valid
in it, folded from the turn's events (`evolve`, `evolve_model`) and matched to the end by
its decider (`decide._in_phase`) and its hook points (`interceptors.hook_point`).

    SessionTurnStart ─► Receiving ─► Composing ─► Requesting ─► AwaitingModel
    AwaitingModel ─┬─► Responded ─┬─► CallingTools ─► Composing (the next round)
                   │              ├─► Composing (max_tokens, a stop hook's iterate)
                   │              └─► Rendering ─► Ended{completed}
                   └─► ModelFailed ─┬─► Requesting (the history compacted, asked again)
                                    └─► Ended{failed}
    any phase ─► Ended (a bound, a hook's stop, an interrupt, the log full)
    Ended ─► the turn closes (SessionTurnEnd), its reply settled first

Each phase but `Ended` stands in one of the contract's stages (`Stage`), `open` between
its `StagePreFired` and `StagePostFired`, closed after (the turn's events name the stage;
the phase says what the turn holds there). `AwaitingModel` and `ModelFailed` keep the
stage they stand in (SEND_REQUEST, or STREAM_RESPONSE once a streamed tool call opened
it). `Ended` keeps the end until the turn closes (`SessionTurnEnd`): its reply is settled
first. An `Ended` phase is never left: a late event of an ended turn moves nothing.

Round data lives in the phases it is valid in: the request an interceptor changed in
`Requesting` and `AwaitingModel` (a new SEND_REQUEST asks anew), the round's `Response`
in `Requesting` once recorded and in `Responded`, the calls it asks for in `CallingTools`
(`_entered` in `evolve` carries them on; a phase after holds none). The calls proposed
so far, the turn's bounds and its interrupt stay on `ActiveTurn`. `ActiveTurn.stage`,
`.stage_open`, `.awaiting_provider`, `.request_change`, `.requested_calls`,
`.round_reply` and `.end` read the phase.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field

from turnstream.core.events import FailureClass, RequestChange, Stage, ToolUseBlock, TurnStatus
from turnstream.core.immutable import with_changes


@dataclass(frozen=True)
class ToolCall:
    """A tool call as the model made it."""

    id: str
    name: str
    arguments: dict[str, Any]

    @classmethod
    def of(cls, block: ToolUseBlock) -> ToolCall:
        """The call a `tool_use` block of a recorded response names."""
        return cls(block.id, block.name, block.input)

    def block(self) -> ToolUseBlock:
        """The call as a `tool_use` block, as responses are recorded."""
        return ToolUseBlock(id=self.id, name=self.name, input=self.arguments)


@dataclass(frozen=True)
class Response:
    """The round's model response as the turn acts on it (`ProviderRequestCompleted`, or a
    response interceptor's replacement): from it being recorded until its calls are made."""

    calls: tuple[ToolCall, ...] = ()
    """The tool calls it asks for (a stage's completion call answered: none left)."""
    reply_before: tuple[str, str] = ("", "")
    """The turn's reply before this round and the separator the round's text joins with (a
    replacement joins the same way)."""


@dataclass(frozen=True)
class Receiving:
    """RECEIVE_INPUT: the input is in; its hooks may rewrite it (open), then it composes."""

    open: bool = True
    kind: Literal["receiving"] = "receiving"

    @property
    def stage(self) -> Stage:
        return Stage.RECEIVE_INPUT


@dataclass(frozen=True)
class Composing:
    """COMPOSE_REQUEST: the context providers answer (open); the budget is checked (closed)."""

    open: bool = True
    kind: Literal["composing"] = "composing"

    @property
    def stage(self) -> Stage:
        return Stage.COMPOSE_REQUEST


@dataclass(frozen=True)
class Requesting:
    """SEND_REQUEST before the model call starts: its interceptor may change the request.
    Closed without a call (a crash between batches): the call is asked again."""

    open: bool = True
    change: RequestChange | None = None
    """What an LLM interceptor changed in this round's request (its `modify`)."""
    response: Response | None = None
    """The response, once recorded (STREAM_RESPONSE opens next)."""
    kind: Literal["requesting"] = "requesting"

    @property
    def stage(self) -> Stage:
        return Stage.SEND_REQUEST


@dataclass(frozen=True)
class AwaitingModel:
    """The model call is in flight (`ProviderRequestStarted`): the shell makes it; tool
    calls it streams complete are proposed and may run."""

    stage: Stage = Stage.SEND_REQUEST
    open: bool = True
    change: RequestChange | None = None
    """The request as an interceptor changed it (`Requesting.change`): the shell's call."""
    kind: Literal["awaiting_model"] = "awaiting_model"


@dataclass(frozen=True)
class ModelFailed:
    """The model call failed for good (`ProviderRequestFailed`): a compaction may help (a
    prompt too long), else the turn ends failed."""

    error: str
    """`class: message` of the failure."""
    stage: Stage = Stage.SEND_REQUEST
    open: bool = True
    veto: str | None = None
    """A compaction interceptor refused the compaction: which hook, and why."""
    kind: Literal["model_failed"] = "model_failed"


@dataclass(frozen=True)
class Responded:
    """STREAM_RESPONSE: the response is in; its interceptor may replace it (open); then the
    turn calls tools, goes on, or renders (closed). No response: it was lost (a crash
    between batches), and the model is asked again."""

    open: bool = True
    response: Response | None = None
    kind: Literal["responded"] = "responded"

    @property
    def stage(self) -> Stage:
        return Stage.STREAM_RESPONSE


@dataclass(frozen=True)
class CallingTools:
    """TOOL_CALL: the round's calls are proposed, judged, run (open); their results join
    the history as it closes."""

    open: bool = True
    asked: tuple[ToolCall, ...] = ()
    """The calls the response asked for (`ActiveTurn.calls` are those proposed so far)."""
    kind: Literal["calling_tools"] = "calling_tools"

    @property
    def stage(self) -> Stage:
        return Stage.TOOL_CALL


@dataclass(frozen=True)
class Rendering:
    """RENDER: the reply is rendered (`RenderEmitted`; its hooks may rewrite it first)."""

    open: bool = True
    rendered: bool = False
    kind: Literal["rendering"] = "rendering"

    @property
    def stage(self) -> Stage:
        return Stage.RENDER


@dataclass(frozen=True)
class Ended:
    """The turn ended (`TurnEnded`): it closes once its reply, if it owes one, is settled."""

    status: TurnStatus
    stage: Stage
    """The stage it ended in."""
    failure: FailureClass | None = None
    """Why it did not complete."""
    reason: str | None = None
    reply_settled: bool = False
    """The reply to `reply_to` is recorded (`MessageSent` or `MessageDropped`)."""
    rendered: bool = False
    kind: Literal["ended"] = "ended"

    @property
    def open(self) -> bool:
        return False


Phase = Annotated[
    Receiving
    | Composing
    | Requesting
    | AwaitingModel
    | ModelFailed
    | Responded
    | CallingTools
    | Rendering
    | Ended,
    Field(discriminator="kind"),
]
SUCCESSORS: dict[str, frozenset[str]] = {
    "receiving": frozenset({"composing", "requesting"}),
    "composing": frozenset({"requesting"}),
    "requesting": frozenset({"awaiting_model", "responded"}),
    "awaiting_model": frozenset({"requesting", "responded", "model_failed"}),
    "model_failed": frozenset({"requesting", "awaiting_model"}),
    "responded": frozenset({"calling_tools", "composing", "rendering", "requesting"}),
    "calling_tools": frozenset({"composing", "rendering"}),
    "rendering": frozenset(),
    "ended": frozenset(),
}
"""The phases each phase (by `kind`) may move to, besides staying (opened or closed) and
`ended`, which any phase may reach: the diagram above as data. A fold that moves a turn
another way fails `tests/unit/test_turn_phases.py`. (`requesting` after `receiving` or
`responded`, `awaiting_model` after `model_failed`: a response lost in a crash between
batches, or a compacted history, is asked for again.)"""
START = Receiving()
"""A turn's phase before its first event (a turn is folded from `SessionTurnStart`)."""
Staged = Receiving | Composing | Requesting | Responded | CallingTools | Rendering


def opened(stage: Stage) -> Staged:
    """The phase a `StagePreFired` of `stage` opens."""
    return _OPEN[stage]


def closed(stage: Stage) -> Staged:
    """The phase a `StagePostFired` of `stage` leaves (the response lost, if it closes
    SEND_REQUEST without one)."""
    return _CLOSED[stage]


_OPEN: dict[Stage, Staged] = {
    Stage.RECEIVE_INPUT: Receiving(),
    Stage.COMPOSE_REQUEST: Composing(),
    Stage.SEND_REQUEST: Requesting(),
    Stage.STREAM_RESPONSE: Responded(),
    Stage.TOOL_CALL: CallingTools(),
    Stage.RENDER: Rendering(),
}
_CLOSED: dict[Stage, Staged] = {
    Stage.RECEIVE_INPUT: Receiving(open=False),
    Stage.COMPOSE_REQUEST: Composing(open=False),
    Stage.SEND_REQUEST: Requesting(open=False),
    Stage.STREAM_RESPONSE: Responded(open=False),
    Stage.TOOL_CALL: CallingTools(open=False),
    Stage.RENDER: Rendering(open=False),
}


def with_response(phase: Phase, change: Callable[[Response], Response]) -> Phase:
    """`phase` with its response changed (a stage's completion answered, an interceptor's
    replacement); a phase without one is left as it is."""
    if isinstance(phase, Requesting | Responded) and phase.response is not None:
        return with_changes(phase, response=change(phase.response))
    return phase
