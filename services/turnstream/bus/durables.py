"""Every durable consumer of a deployment, defined once (DESIGN §13), beside the streams.

The setup step (`turnstream streams apply` as the operator, and `turnstream up`) creates or
updates them with `ensure_durables`; a service binds to its own (`bound_config`) and never
creates, updates or deletes one: its NATS user may not (ops/accounts.conf), so no service
can reset what another has processed (tests/security/test_durables.py tries).

    durable         stream               kind  hands over
    gateway         TS_INBOUND           push  every inbound command
    turn-runner     TS_LOG (each part)   push  the facts that move a turn forward
    approval        TS_LOG (each part)   push  proposals, verdicts, answers, turn ends
    tool-executor   TS_LOG (each part)   push  tool requests
    audit           TS_LOG (each part)   pull  everything, acked once per batch
    a2a-push        TS_LOG (each part)   pull  what changes an A2A task's state
    channel-<p>     TS_LOG (each part)   push  what a chat channel shows (one per platform)
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from nats.js import api
from nats.js.errors import NotFoundError

from turnstream.bus.retry import retried
from turnstream.bus.streams import CHANNEL_PLATFORMS, SETUP_STEP, StreamsMissing
from turnstream.core.subjects import Subjects

log = logging.getLogger("turnstream.bus")


class DurableMissing(StreamsMissing):
    """A service's durable consumer does not exist: the setup step makes it."""


@dataclass(frozen=True)
class Durable:
    """One durable consumer, on the inbound stream or on every log stream."""

    name: str
    kinds: tuple[str, ...] | None
    """The log's event kinds it is handed; None: everything on its stream."""
    ack_wait_s: float
    """How long a message handed to a process that died waits before it comes again."""
    max_ack_pending: int = 20_000
    push: bool = True
    """A push consumer (a deliver group every instance joins), else a pull one."""
    ack_all: bool = False
    """One ack covers every earlier message (a single in-order reader, acking per batch)."""
    inbound: bool = False
    """On the inbound stream (the gateway's), not the log."""
    from_next: bool = False
    """Made new, it starts at its stream's next message (nothing before it is its business)."""

    def streams(self, subjects: Subjects) -> list[tuple[str, int | None]]:
        """The streams it is on, each with its log partition (None: the inbound stream)."""
        if self.inbound:
            return [(subjects.inbound_stream, None)]
        return [(subjects.log_stream_at(k), k) for k in range(subjects.log_partitions)]

    def filters(self, subjects: Subjects) -> list[str]:
        if self.inbound:
            return [subjects.inbound_all]
        if self.kinds is None:
            return [subjects.log_all]
        return [subjects.log_kind(kind) for kind in self.kinds]

    def config(self, subjects: Subjects, partition: int | None) -> api.ConsumerConfig:
        """Its definition on the stream of `partition`."""
        return api.ConsumerConfig(
            durable_name=self.name,
            deliver_subject=subjects.deliver(self.name, partition) if self.push else None,
            deliver_group=self.name if self.push else None,
            filter_subjects=self.filters(subjects),
            ack_policy=api.AckPolicy.ALL if self.ack_all else api.AckPolicy.EXPLICIT,
            ack_wait=self.ack_wait_s,
            max_ack_pending=self.max_ack_pending,
        )


SESSION_ACK_WAIT_S = 10.0
"""The turn-runner's and approval's ack wait: their per-session mailboxes keep what they
hold in progress, so what a dead instance had comes again this soon."""
GATEWAY = Durable("gateway", None, ack_wait_s=5.0, max_ack_pending=4 * 256, inbound=True)
"""A command not acked in 5 s is redelivered (a live gateway keeps its batch with
in-progress acks); four batches (`consume.BATCH`) in hand, so a backlog comes in what is
appended well within the ack wait."""
TURN_RUNNER = Durable(
    "turn-runner",
    (
        "SessionConfigured",
        "InputAccepted",
        "InputRejected",
        "WorkflowAttached",
        "InterruptReceived",
        "ToolCallApproved",
        "ToolCallDenied",
        "ToolInvocationSucceeded",
        "ToolInvocationFailed",
        "ToolInvocationCancelled",
    ),
    ack_wait_s=SESSION_ACK_WAIT_S,
    max_ack_pending=512,
)
"""The event kinds that move a turn forward. The facts in a runner's hands at once are
bounded: a burst of 20,000 new sessions waits in the stream, not in the runner's memory
(each kept in progress while it waits), and is handed over as facts are settled. 512, not
2,048: the facts in hand (each with its session's actor, waiting for one of the 32 load
slots) are a burst's peak of memory, and the allocator keeps its arenas at that peak
(docs/performance.md, "A burst of new sessions"); 512 still keeps every load slot fed."""
APPROVAL = Durable(
    "approval",
    ("ToolCallModeInvoked", "ToolInvocationProposed", "InteractionAnswered", "TurnEnded"),
    ack_wait_s=SESSION_ACK_WAIT_S,
)
TOOL_EXECUTOR = Durable("tool-executor", ("ToolInvocationRequested",), ack_wait_s=15.0)
AUDIT = Durable("audit", None, ack_wait_s=60.0, push=False, ack_all=True)
A2A_PUSH_KINDS = (
    "InputAccepted",
    "InputRejected",
    "InteractionAnswered",
    "InteractionRequested",
    "SessionTurnStart",
    "SteeringInjected",
    "TurnEnded",
)
"""What an A2A task's state changes on (`http/a2a/view.ACTED_ON` but the stage markers)."""
A2A_PUSH_IN_FLIGHT = 1024


def a2a_push(push_timeout_s: float) -> Durable:
    """The HTTP face's push delivery: an event in hand whose acknowledgement is lost comes
    again after two webhook timeouts and a second."""
    return Durable(
        "a2a-push",
        A2A_PUSH_KINDS,
        ack_wait_s=2 * push_timeout_s + 1,
        max_ack_pending=A2A_PUSH_IN_FLIGHT,
        push=False,
        from_next=True,
    )


CHANNEL_KINDS = (
    "SessionTurnStart",
    "ToolInvocationRequested",
    "InteractionRequested",
    "InteractionAnswered",
    "TurnEnded",
)
"""What a chat channel shows: a turn working, its tool activity, approval prompts and
their answers, the final reply (`channels.outbound`)."""


def channel(platform: str) -> Durable:
    """The log durable of the chat channel of `platform`. Made new, it starts at the log's
    next event: a channel added to a running deployment does not post old replies. What a
    killed channel held comes again after 10 s (a live one keeps what it is posting, 429
    waits included, in progress)."""
    return Durable(
        f"channel-{platform}",
        CHANNEL_KINDS,
        ack_wait_s=SESSION_ACK_WAIT_S,
        max_ack_pending=1024,
        from_next=True,
    )


def every_durable(push_timeout_s: float) -> tuple[Durable, ...]:
    return (
        GATEWAY,
        TURN_RUNNER,
        APPROVAL,
        TOOL_EXECUTOR,
        AUDIT,
        a2a_push(push_timeout_s),
        *(channel(platform) for platform in CHANNEL_PLATFORMS),
    )


def placements(subjects: Subjects, push_timeout_s: float) -> Iterator[tuple[str, Durable, Any]]:
    """Every durable on every stream it is on: the stream, the durable, its config."""
    for durable in every_durable(push_timeout_s):
        for stream, partition in durable.streams(subjects):
            yield stream, durable, durable.config(subjects, partition)


async def ensure_durables(js: Any, subjects: Subjects, push_timeout_s: float) -> None:
    """The setup step's part for consumers: create each durable missing, update each whose
    definition changed; idempotent."""
    for stream, durable, config in placements(subjects, push_timeout_s):
        await define_durable(js, stream, config, from_next=durable.from_next)


async def define_durable(
    js: Any, stream: str, config: api.ConsumerConfig, *, from_next: bool = False
) -> None:
    """Create or update the durable `config` names. One of the other kind (push for pull or
    pull for push), with another ack policy, or (`from_next`) one that cannot be moved
    forward (made to deliver only new messages), which the server cannot change in place,
    is replaced, resuming after its ack floor so nothing is processed twice or skipped.
    Where a consumer starts is fixed for its lifetime; a new one starts at its stream's
    first message, or (`from_next`) at its next."""
    durable = config.durable_name
    try:
        existing = await js.consumer_info(stream, durable)
    except NotFoundError:
        existing = None
    if existing is not None and (
        (existing.config.deliver_subject is None) != (config.deliver_subject is None)
        or existing.config.ack_policy != config.ack_policy
        or (from_next and existing.config.deliver_policy != api.DeliverPolicy.BY_START_SEQUENCE)
    ):
        floor = existing.ack_floor.stream_seq if existing.ack_floor else 0
        log.warning("replacing consumer %s on %s (another kind) after %d", durable, stream, floor)
        await js.delete_consumer(stream, durable)
        config.deliver_policy = api.DeliverPolicy.BY_START_SEQUENCE
        config.opt_start_seq = floor + 1
    elif existing is not None:
        config.deliver_policy = existing.config.deliver_policy
        config.opt_start_seq = existing.config.opt_start_seq
    elif from_next:
        config.deliver_policy = api.DeliverPolicy.BY_START_SEQUENCE
        config.opt_start_seq = int((await js.stream_info(stream)).state.last_seq) + 1
    await js.add_consumer(stream, config=config)


async def bound_config(
    js: Any, subjects: Subjects, durable: Durable, stream: str, partition: int | None
) -> api.ConsumerConfig:
    """The definition of `durable` on `stream` as the server has it, for a service to bind
    to: `DurableMissing`, naming the setup step, if it does not exist. One defined otherwise
    than this version expects is used as it is, with a warning naming the fix. NATS not
    answering is asked again until it does (`bus.retry`)."""
    try:
        info = await retried(
            f"consumer {durable.name} on {stream}",
            lambda: js.consumer_info(stream, durable.name),
        )
    except NotFoundError as exc:
        raise DurableMissing(f"consumer {durable.name} on {stream} missing: {SETUP_STEP}") from exc
    made: api.ConsumerConfig = info.config
    if (made.deliver_subject is not None) != durable.push:
        kind = "push" if made.deliver_subject is not None else "pull"
        raise DurableMissing(
            f"consumer {durable.name} on {stream} is a {kind} consumer (an older version's); "
            f"{SETUP_STEP} (it replaces it, going on after what was acked)"
        )
    expected = durable.config(subjects, partition)
    found = sorted(made.filter_subjects or ([made.filter_subject] if made.filter_subject else []))
    if found != sorted(expected.filter_subjects or []) or (
        made.deliver_subject != expected.deliver_subject
    ):
        log.warning(
            "consumer %s on %s is defined otherwise than this version expects (filters %s); "
            "run the setup step (`turnstream streams apply`) to update it",
            durable.name,
            stream,
            found,
        )
    return made
