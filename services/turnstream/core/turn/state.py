"""What the turn decider knows: a chat and its turns, and its configuration."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from turnstream.core.approval import ApprovalConfig
from turnstream.core.costs import Budget, Price, Spent
from turnstream.core.events import (
    Attachment,
    RequestChange,
    Sender,
    Stage,
    StopReason,
    TurnStatus,
)
from turnstream.core.ids import IdFactory
from turnstream.core.turn.hooks import HookPoint
from turnstream.core.turn.phases import (
    START,
    AwaitingModel,
    CallingTools,
    Ended,
    Phase,
    Requesting,
    Responded,
)
from turnstream.core.turn.phases import ToolCall as ToolCall  # the turn's records, from here


@dataclass(frozen=True)
class Message:
    """One entry of the conversation history the next request is composed from."""

    role: Literal["user", "assistant", "tool"]
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    """assistant: the calls it made."""
    tool_call_id: str | None = None
    """tool: which call this is the result of."""
    is_error: bool = False
    attachments: tuple[Attachment, ...] = ()
    """user: the files the message carried (their bytes are in the object store)."""


@dataclass(frozen=True)
class ToolInfo:
    """What the turn needs to know about a tool: to offer it and to schedule it."""

    name: str
    description: str
    parameters: dict[str, Any]
    read_only: bool
    idempotent: bool
    timeout_s: float


CallStatus = Literal[
    "proposed", "approved", "denied", "requested", "succeeded", "failed", "cancelled"
]
TERMINAL: frozenset[str] = frozenset({"denied", "succeeded", "failed", "cancelled"})


@dataclass(frozen=True)
class ToolCallState:
    invocation_id: str
    call_id: str
    tool: str
    args: dict[str, Any]
    index: int
    read_only: bool
    idempotent: bool
    timeout_ms: int
    status: CallStatus = "proposed"
    result: str = ""
    is_error: bool = False
    hooked: bool = False
    """The tool hooks let this approved call through (a runtime call: `HookDecided`)."""
    proposed_id: str = ""
    proposed_at: datetime | None = None
    """Its `ToolInvocationProposed`'s id and time: the approval verdicts derive theirs."""
    judged: bool = False
    """The security mode's verdict on it is in (`ToolCallModeInvoked`; `ask`: a person's
    answer is still to come)."""

    @property
    def done(self) -> bool:
        return self.status in TERMINAL


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
    key: str = ""
    """The sender's idempotency key (a reply answers `inReplyTo` it)."""
    hops: int = 0
    depth: int = 0
    """0 for a root turn; a sub-turn's input is one deeper than its parent's turn."""
    budget: int | None = None
    """Sub-turns its turn may start in all (None: a root turn, TURNSTREAM_MAX_SUBTURNS_PER_ROOT)."""
    attachments: tuple[Attachment, ...] = ()


@dataclass(frozen=True, slots=True)
class ContextBlock:
    """One context provider's contribution to a turn, as its requests carry it."""

    provider: str
    content: str
    volatile: bool = False
    """After the prompt-cache prefix (at the end of the request), not in the system prompt."""


@dataclass(frozen=True, slots=True)
class Interrupt:
    """An interrupt of the turn (`InterruptReceived`)."""

    mode: Literal["graceful", "hard"]
    sender: str
    """Who sent it, as `<kind>:<id>`."""
    round: int
    """The round it arrived in (a graceful one's summary is the round after)."""


@dataclass(frozen=True, slots=True)
class Abort:
    """A hook stopped the turn (`HookDecided`): the turn ends at its next step."""

    action: Literal["abort_turn", "hard_abort"]
    reason: str


@dataclass(frozen=True)
class ActiveTurn:
    """The chat's turn in progress: its identity, where it stands (`phase`), and what it
    carries across its phases (its round, its reply so far, its calls, its bounds)."""

    turn_id: str
    input_id: str
    """The `InputAccepted` it answers."""
    chat_id: str
    trace_id: str
    correlation_id: str
    reply_to: str | None
    """The session its reply goes to (an agent's message), if any."""
    last_event_id: str
    """Its last event: the next one's causation id."""
    started_at: datetime | None = None
    """Its `SessionTurnStart`'s time (the wall-time bound counts from it)."""
    phase: Phase = START
    """Where the turn stands (`turnstream.core.turn.phases`)."""
    iteration: int = 0
    """Its round: the model calls it made (COMPOSE_REQUEST counts them)."""
    stop_reason: StopReason | None = None
    """Why the latest model response stopped."""
    completions: int = 0
    """Model responses recorded (`max_tokens` continuations are bounded by them)."""
    reply: str = ""
    """The reply so far: each round's text joined (`changes.joined`)."""
    calls: tuple[ToolCallState, ...] = ()
    """This round's proposed calls, in the model's order."""
    tool_calls_made: int = 0
    """Calls proposed in the whole turn (`maxToolCallsPerTurn`)."""
    abort: Abort | None = None
    steering: tuple[str, ...] = ()
    """Texts to join the history as user messages at the next COMPOSE_REQUEST."""
    history_start: int = 0
    """Index in the history of this turn's first message (compaction keeps it and after)."""
    compacted: bool = False
    """The history was compacted once for this turn (a prompt-too-long retry)."""
    interrupt: Interrupt | None = None
    summary_asked: bool = False
    """A graceful interrupt's request to summarise has been injected."""
    input_key: str = ""
    """The idempotency key of the turn's input (its reply is `inReplyTo` it)."""
    hops: int = 0
    """Agent-to-agent deliveries its input took (`TURNSTREAM_MAX_HOPS`)."""
    depth: int = 0
    """0 for a root turn; a sub-turn is one deeper than its parent."""
    budget: int | None = None
    """Sub-turns its tree may start in all (None: a root turn's own bound)."""
    on_fallback: bool = False
    """The primary model failed for good once (`ProviderFallback`): the rest of the turn's
    calls go to the fallback model."""
    context: tuple[ContextBlock, ...] = ()
    """What the context providers contributed to this turn (`ContextProvided`)."""
    spent: Spent = ()
    """The tokens this turn's model calls used, per `<provider>/<model>` (budgets)."""
    context_gathered: bool = False
    """The turn's first COMPOSE_REQUEST is over: its context is in (or there was none)."""

    @property
    def stage(self) -> Stage:
        """The stage the turn stands in (the one its stage events name)."""
        return self.phase.stage

    @property
    def stage_open(self) -> bool:
        """Its stage is open (between its `StagePreFired` and `StagePostFired`)."""
        return self.phase.open

    @property
    def awaiting_provider(self) -> bool:
        """The model call is in flight: the shell makes it."""
        return type(self.phase) is AwaitingModel

    @property
    def requested_calls(self) -> tuple[ToolCall, ...]:
        """The tool calls of the round's response, from its record until TOOL_CALL closes."""
        phase = self.phase
        if type(phase) is CallingTools:
            return phase.asked
        if type(phase) is Responded or type(phase) is Requesting:
            response = phase.response
            return response.calls if response is not None else ()
        return ()

    @property
    def round_reply(self) -> tuple[str, str] | None:
        """Once the round's response is recorded (until STREAM_RESPONSE closes): the reply
        before it and the separator its text joins with."""
        phase = self.phase
        if type(phase) is Responded or type(phase) is Requesting:
            response = phase.response
            return response.reply_before if response is not None else None
        return None

    @property
    def request_change(self) -> RequestChange | None:
        """What an LLM interceptor changed in this round's model request (SEND_REQUEST pre)."""
        phase = self.phase
        return phase.change if type(phase) is Requesting or type(phase) is AwaitingModel else None

    @property
    def end(self) -> Ended | None:
        """Its end, once `TurnEnded` is recorded."""
        phase = self.phase
        return phase if type(phase) is Ended else None


@dataclass(frozen=True)
class ChatState:
    """A conversation and its turns: the session's own chat, or a workflow stage's lane,
    whose history is the stage-local transcript; a fold over the events of its turns.

    The session's state (`turnstream.core.session.SessionState`) holds one (its chat)
    beside the attached run, whose stage executions hold one each (their lanes).
    """

    session_id: str
    pending: tuple[PendingInput, ...] = ()
    active: ActiveTurn | None = None
    history: tuple[Message, ...] = ()
    attachments: tuple[Attachment, ...] = ()
    """The attachments its history's messages carry, in order (a model call finds the files
    it needs here, not by reading the whole history)."""
    provider_calls: int = 0
    turns_ended: int = 0
    last_turn_id: str | None = None
    last_status: TurnStatus | None = None
    summary: str = ""
    """A running summary of the messages compaction dropped (the `summary` context provider)."""
    spent: Spent = ()
    """The tokens its model calls used, per `<provider>/<model>` (budgets)."""


@dataclass(frozen=True, slots=True)
class Act:
    """Where a workflow stage's Act stands: the stage's, not its turn's (the stage execution
    keeps it, `turnstream.core.workflow.state.StageRun`, and hands it to its turn in its
    `StageSpec`); a chat turn has none."""

    start: int = 0
    """The round the current Act attempt started after (turnCap counts on from it)."""
    checked: int = 0
    """The last round whose response the completion channel judged."""
    done: bool = False
    """Act ended (a valid completion, the cap, an interrupt's summary): Assert decides next."""


@dataclass(frozen=True)
class StageSpec:
    """A turn that is a workflow stage execution: its envelope and completion channel, and
    where its Act stands."""

    run_id: str
    stage_id: str
    execution_id: str
    allowed_tools: tuple[str, ...]
    completion_tool: str
    completion_schema: dict[str, Any]
    turn_cap: int
    act: Act = Act()


@dataclass(frozen=True)
class TurnConfig:
    provider: str = "scripted"
    model: str = "demo"
    max_iterations: int = 50
    max_output_continuations: int = 1
    system_prompt: str | None = None
    tools: tuple[ToolInfo, ...] = ()
    max_tool_calls_per_turn: int = 64
    max_turn_seconds: float = 600.0
    followup_policy: Literal["collect", "steer"] = "collect"
    """A message arriving during a turn: queued for the next turn, or steered into this one."""
    offer_tools: bool = True
    """The model supports tool calling (`toolCalling: hard`); else no tools are offered."""
    tool_hooks: bool = False
    """Guard or transform hooks run on each approved call before it is requested."""
    stage_hooks: frozenset[HookPoint] = frozenset()
    """The hook points with guard or transform hooks: the turn waits for them there."""
    stage: StageSpec | None = None
    """Set for the turn of a workflow stage execution."""
    workflow_hooks: frozenset[str] = frozenset()
    """Workflow points (`CheckGate`, `Assert`) that have hooks: the shell runs them."""
    agent: str | None = None
    """The session's agent profile (`SessionConfigured`), for scripts and providers."""
    agents: frozenset[str] | None = None
    """The agent profiles a `spawn` may name (None: not checked here)."""
    max_hops: int = 8
    """Agent-to-agent deliveries a chain may take; the next is `MessageDropped`."""
    max_subturn_depth: int = 3
    max_subturns: int = 5
    """Sub-turns one turn may have running at once."""
    max_subturns_per_root: int = 25
    """Sub-turns a root turn's whole tree may start."""
    subturn_deadline_s: float = 300.0
    """A sub-turn not ended by then ends `failed/timeout` for its parent."""
    fallback: tuple[str, str] | None = None
    """The fallback model's `(provider, model)` (`TURNSTREAM_FALLBACK_MODEL`), if any."""
    context_providers: bool = False
    """Context providers are configured: the shell gathers each turn's context."""
    approval: ApprovalConfig | None = None
    """The approval rules the turn judges its calls by (`turnstream.core.approval.judge`;
    the session's fixed mode is its `default_mode`); None: it leaves every call to a
    decider outside (tests of the turn alone)."""
    hold_inputs: bool = False
    """A workflow attached or running goes first: a new input waits (the session's decider
    sets it while a run is open)."""
    budget: Budget = field(default_factory=Budget)
    """What a turn and its session may spend on the model (`core/turn/budget.py`)."""
    session_spent: Spent | None = None
    """What the whole session spent (its chat and its workflow stages) when the turn is one
    conversation of several; None: its conversation's own (`ChatState.spent`)."""
    prices: tuple[tuple[str, Price], ...] = ()
    """The deployment's price table as `(<provider>/<model>, Price)` pairs, for dollar
    budgets (a dated model takes its family's price, as `core.costs.price_of` says)."""

    def tool(self, name: str) -> ToolInfo | None:
        return next((t for t in self.tools if t.name == name), None)


@dataclass(frozen=True)
class Context:
    now: datetime
    new_id: IdFactory
    source: str
