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

The request an interceptor changed lives in the two phases it is valid in (`Requesting`,
`AwaitingModel`): a new SEND_REQUEST asks anew. Data of a round that more phases share
(the calls, the reply before the round's response) stays on `ActiveTurn` for now, as do
the turn's bounds and its interrupt. `ActiveTurn.stage`, `.stage_open`,
`.awaiting_provider`, `.request_change` and `.end` read the phase.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field

from turnstream.core.events import FailureClass, RequestChange, Stage, TurnStatus


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
    turn calls tools, goes on, or renders (closed)."""

    open: bool = True
    kind: Literal["responded"] = "responded"

    @property
    def stage(self) -> Stage:
        return Stage.STREAM_RESPONSE


@dataclass(frozen=True)
class CallingTools:
    """TOOL_CALL: the round's calls are proposed, judged, run (open); their results join
    the history as it closes."""

    open: bool = True
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
