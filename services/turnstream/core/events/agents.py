"""Agent events (DESIGN §11): a session's agent, messages between sessions, sub-turns."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from turnstream.core.events.base import EventBase, FailureClass, TurnStatus, WireModel
from turnstream.core.events.tools import SecurityMode

MessageCause = Literal["replyTo", "send_message", "subturn"]
SpawnMode = Literal["sync", "async"]
Delivery = Literal["tool_result", "steering", "follow_up", "dropped"]


class ParentRef(WireModel):
    """The turn (and its `spawn` call) a sub-turn's input comes from."""

    session_id: str
    turn_id: str
    invocation_id: str
    depth: Annotated[int, Field(ge=1)]
    """1 for a child of a root turn, 2 for a grandchild, …"""
    budget: Annotated[int, Field(ge=0)] | None = None
    """Sub-turns the child's turn may start in all, below it: its share of the root turn's
    TURNSTREAM_MAX_SUBTURNS_PER_ROOT (a parent gives each child a share and never more
    than it has, so a whole tree stays within the root's)."""


class ReplyOutcome(WireModel):
    """How the turn a reply comes from ended (a sub-turn's parent records it)."""

    turn_id: str
    status: TurnStatus
    failure_class: FailureClass | None = None


class AgentBudget(WireModel):
    """An agent profile's budget (`budget:` in its frontmatter): each limit set replaces the
    deployment's (`TURNSTREAM_BUDGET`) for its sessions."""

    turn_tokens: int | None = Field(default=None, ge=1)
    session_tokens: int | None = Field(default=None, ge=1)
    turn_usd: float | None = Field(default=None, gt=0)
    session_usd: float | None = Field(default=None, gt=0)


class SessionConfiguredData(WireModel):
    """The agent a session talks to, fixed by its first `message` that names one; the
    profile as it was then, so a replay does not depend on today's profile files."""

    agent: str
    description: str = ""
    provider: Literal["scripted", "anthropic", "openai"] | None = None
    model: str | None = None
    tools: list[str] | None = None
    """The tools its turns are offered (an allowlist); None: every tool."""
    security_mode: SecurityMode | None = None
    max_iterations: int | None = None
    system_prompt: str = ""
    idempotency_key: str
    """The message that named the agent."""
    fallback_model: str | None = None
    """The profile's fallback model (`fallbackModel`); None: the deployment's."""
    fallback_provider: Literal["scripted", "anthropic", "openai"] | None = None
    budget: AgentBudget | None = None
    """The profile's budget; None: the deployment's."""


class SessionConfigured(EventBase):
    type: Literal["SessionConfigured"] = "SessionConfigured"
    data: SessionConfiguredData


class MessageSentData(WireModel):
    """A `message` (or an `interrupt`) this session published to another session's inbound
    subject (the runtime's own form, `<prefix>.in.<to>.agent`) and JetStream acknowledged;
    `idempotencyKey` is also its `Nats-Msg-Id`, derived from the turn or the tool call, so
    a retry after a crash is a no-op."""

    to: str
    idempotency_key: str
    hops: int
    """The `hops` of the message sent (the cause's input's hops + 1)."""
    cause: MessageCause
    kind: Literal["message", "interrupt"] = "message"
    invocation_id: str | None = None
    """The `send_message` or `spawn` call it was sent for."""
    in_reply_to: str | None = None


class MessageSent(EventBase):
    type: Literal["MessageSent"] = "MessageSent"
    data: MessageSentData


class MessageDroppedData(WireModel):
    to: str
    reason: Literal["hop_limit", "refused"]
    """`hop_limit`: past TURNSTREAM_MAX_HOPS, not sent; `refused`: the server refused the
    turn-runner's publish (its NATS user may not publish to `<prefix>.in.<to>.agent`)."""
    hops: int
    """The hops the message would have carried."""
    cause: MessageCause
    invocation_id: str | None = None
    detail: str | None = None
    """Why, in words (a refusal: the server's error)."""


class MessageDropped(EventBase):
    type: Literal["MessageDropped"] = "MessageDropped"
    data: MessageDroppedData


class SubTurnSpawnedData(WireModel):
    invocation_id: str
    child_session_id: str
    agent: str | None = None
    mode: SpawnMode
    depth: int
    task: str
    idempotency_key: str
    """The key of the child's input (its reply comes back `inReplyTo` it)."""
    deadline_s: float
    """The child must end within this long, or it ends `failed/timeout` for its parent."""
    budget: int = 0
    """The sub-turns the child may start below it (`parent.budget` of its input)."""


class SubTurnSpawned(EventBase):
    type: Literal["SubTurnSpawned"] = "SubTurnSpawned"
    data: SubTurnSpawnedData


class SubTurnEndedData(WireModel):
    invocation_id: str
    child_session_id: str
    child_turn_id: str | None = None
    status: TurnStatus
    failure_class: FailureClass | None = None
    reply: str = ""


class SubTurnEnded(EventBase):
    type: Literal["SubTurnEnded"] = "SubTurnEnded"
    data: SubTurnEndedData


class SubTurnResultDeliveredData(WireModel):
    invocation_id: str
    child_session_id: str
    delivered_as: Delivery = Field(alias="as")
    """`tool_result` (sync), `steering` (async, its turn still running), `follow_up` (async,
    its turn over: a new turn), `dropped` (sync, its turn over: nobody waits for it)."""
    input_id: str | None = None
    """The parent's `InputAccepted` of the child's reply (absent for a timeout)."""


class SubTurnResultDelivered(EventBase):
    type: Literal["SubTurnResultDelivered"] = "SubTurnResultDelivered"
    data: SubTurnResultDeliveredData
