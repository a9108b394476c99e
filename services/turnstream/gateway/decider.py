"""The gateway's decider: a batch of inbound commands → the events to append, each command
read once (`intake.read`), every fact only I/O can tell an input, never a call.

    Arrived(raws) ─► each command read into a Draft: its events and its questions
    the drafts settled in order:
      a draft asking something ─► AskRequested | AskAgent | StoreAttachments (effect)
          Requested | AgentIs | AttachmentsStored (input) ─► the draft settled by it
          (an agent this batch already knows is not asked again)
      a second message configuring a session the chunk configures ─► ClaimKeys(chunk)
          (it must see whether the first did: a key used before configures nothing)
      the last draft settled ─► ClaimKeys(chunk)
          Claimed(firsts) ─► the chunk's events but those of a key its session used
          before (the first command's events answer that sender)
    all settled ─► the batch's events, to append; no effect

| input | when | effect it may bring |
|---|---|---|
| `Arrived` | a batch handed over by the consumer | any |
| `Requested` | answers `AskRequested` | the next question, `ClaimKeys`, none |
| `AgentIs` | answers `AskAgent` | the next question, `ClaimKeys`, none |
| `AttachmentsStored` | answers `StoreAttachments` | the next question, `ClaimKeys`, none |
| `Claimed` | answers `ClaimKeys` | the next question, `ClaimKeys`, none |

The shell (`app.py`) drives it with `runtime.interpreter.run_until_quiet`: each decision
asks for at most one effect, and the last one's events are the batch's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import assert_never

from turnstream.core.events import (
    EventBase,
    InputAccepted,
    InputRejected,
    InteractionAnswered,
    SessionConfigured,
)
from turnstream.gateway.check import Inbound
from turnstream.gateway.dedup import Claim
from turnstream.gateway.intake import (
    AskAgent,
    Draft,
    IntakeConfig,
    Question,
    read,
    reject_unknown_answer,
    reject_unstored,
    settle_agent,
)


@dataclass(frozen=True, slots=True)
class Arrived:
    """A batch of raw commands, in inbound order."""

    raws: tuple[Inbound, ...]


@dataclass(frozen=True, slots=True)
class Requested:
    """Whether the session asked the interaction (`AskRequested`)."""

    found: bool


@dataclass(frozen=True, slots=True)
class AgentIs:
    """The session's agent in its log, if any (`AskAgent`)."""

    agent: str | None


@dataclass(frozen=True, slots=True)
class AttachmentsStored:
    """Why an attachment is not in the object store as described; None: all are."""

    problem: str | None


@dataclass(frozen=True, slots=True)
class Claimed:
    """For each of `ClaimKeys.claims`: whether this command claimed its key first."""

    firsts: tuple[bool, ...]


Input = Arrived | Requested | AgentIs | AttachmentsStored | Claimed


@dataclass(frozen=True, slots=True)
class ClaimKeys:
    """Claim each accepted command's `(session, idempotencyKey)` for its inbound seq."""

    claims: tuple[Claim, ...]


Effect = Question | ClaimKeys


@dataclass(frozen=True, slots=True)
class IntakeState:
    """One batch on its way: the drafts still to settle, the chunk settled but unclaimed,
    the events claimed (or rejections, which claim nothing)."""

    drafts: tuple[Draft, ...] = ()
    """The batch's drafts in inbound order; those from `next` on are not settled yet."""
    next: int = 0
    chunk: tuple[Draft, ...] = ()
    """Settled, their keys not claimed yet."""
    ready: tuple[EventBase, ...] = ()
    """Claimed (or rejected): to append once the batch is settled."""
    agents: Mapping[str, str | None] = field(default_factory=dict)
    """Sessions' agents as this batch knows them: told, or set by a claimed message."""

    @property
    def settled(self) -> bool:
        """Every draft settled and claimed: `ready` is the batch's events."""
        return self.next == len(self.drafts) and not self.chunk


@dataclass(frozen=True, slots=True)
class IntakeDecision:
    """The events to append (the batch's, once it is settled), the state, the effect."""

    events: tuple[EventBase, ...]
    state: IntakeState
    effects: tuple[Effect, ...] = ()


def decide_intake(
    state: IntakeState, item: Input, config: IntakeConfig, now: datetime
) -> IntakeDecision:
    """The batch decided as far as it can go without another fact from the shell."""
    match item:
        case Arrived(raws):
            drafts = tuple(read(raw, config, now) for raw in raws)
            return _advance(IntakeState(drafts=drafts), config, now)
        case Requested(found):
            head = state.drafts[state.next]
            if found:
                return _advance(_head(state, head.answered(list(head.events))), config, now)
            answered = head.events[0]
            assert isinstance(answered, InteractionAnswered)
            events = reject_unknown_answer(head.raw, answered, now=now, source=config.source)
            return _advance(_head(state, head.answered(events)), config, now)
        case AgentIs(agent):
            head = state.drafts[state.next]
            session = head.events[0].session_id
            events = settle_agent(head.raw, list(head.events), agent, now=now, source=config.source)
            known = {**state.agents, session: agent}
            return _advance(_head(_with(state, agents=known), head.answered(events)), config, now)
        case AttachmentsStored(problem):
            head = state.drafts[state.next]
            events = list(head.events)
            if problem is not None:
                accepted = head.events[-1]
                assert isinstance(accepted, InputAccepted)
                source = config.source
                events = reject_unstored(head.raw, accepted, problem, now=now, source=source)
            return _advance(_head(state, head.answered(events)), config, now)
        case Claimed(firsts):
            return _advance(_claimed(state, firsts), config, now)
        case _:
            assert_never(item)


def _with(
    state: IntakeState,
    *,
    drafts: tuple[Draft, ...] | None = None,
    next: int | None = None,
    chunk: tuple[Draft, ...] | None = None,
    ready: tuple[EventBase, ...] | None = None,
    agents: Mapping[str, str | None] | None = None,
) -> IntakeState:
    """`state` with some fields changed (`dataclasses.replace` costs nearly twice as much, and
    the gateway makes a few of these a batch)."""
    return IntakeState(
        state.drafts if drafts is None else drafts,
        state.next if next is None else next,
        state.chunk if chunk is None else chunk,
        state.ready if ready is None else ready,
        state.agents if agents is None else agents,
    )


def _head(state: IntakeState, draft: Draft) -> IntakeState:
    """`state` with the draft being settled replaced by `draft`."""
    drafts = (*state.drafts[: state.next], draft, *state.drafts[state.next + 1 :])
    return _with(state, drafts=drafts)


def _configures(draft: Draft) -> str | None:
    """The session a draft configures the agent of, if it does."""
    first = draft.events[0]
    return first.session_id if isinstance(first, SessionConfigured) else None


def _advance(state: IntakeState, config: IntakeConfig, now: datetime) -> IntakeDecision:
    """Settle the drafts in order until one needs a fact from the shell; the batch's events
    once every draft is settled and claimed."""
    while True:
        decision = _settle(state, config, now)
        if decision.effects or not decision.state.chunk:
            return decision
        claims = _claims(decision.state.chunk)
        if claims:
            return IntakeDecision((), decision.state, (ClaimKeys(claims),))
        state = _claimed(decision.state, ())  # only rejections: nothing to claim


def _settle(state: IntakeState, config: IntakeConfig, now: datetime) -> IntakeDecision:
    """The drafts settled into the chunk in order, up to one that asks what the batch does
    not know, or one that must wait for the chunk's claims."""
    drafts, at, agents = list(state.drafts), state.next, state.agents
    chunk = list(state.chunk)
    configuring = {s for d in chunk if (s := _configures(d)) is not None}
    while at < len(drafts):
        head = drafts[at]
        session = _configures(head)
        if session is not None and session in configuring:
            break  # the chunk is claimed first: did its message configure the session?
        if head.asks:
            ask = head.asks[0]
            if not (isinstance(ask, AskAgent) and ask.session_id in agents):
                held = _with(state, drafts=tuple(drafts), next=at, chunk=tuple(chunk))
                return IntakeDecision((), held, (ask,))
            current, source = agents[ask.session_id], config.source
            drafts[at] = head.answered(
                settle_agent(head.raw, list(head.events), current, now=now, source=source)
            )
            continue  # its next question, or settled
        chunk.append(head)
        if session is not None:
            configuring.add(session)
        at += 1
    state = _with(state, drafts=tuple(drafts), next=at, chunk=tuple(chunk))
    return IntakeDecision(() if chunk else state.ready, state)


def _claims(chunk: Sequence[Draft]) -> tuple[Claim, ...]:
    """The keys the chunk's accepted commands claim (a rejection claims nothing)."""
    return tuple(
        (d.events[0].session_id, d.events[0].correlation_id, d.raw.seq)
        for d in chunk
        if not isinstance(d.events[0], InputRejected)
    )


def _claimed(state: IntakeState, firsts: tuple[bool, ...]) -> IntakeState:
    """The chunk's events ready but those of a key used before; the sessions its claimed
    messages configured known, those whose configuring message was dropped asked again."""
    ready, agents = list(state.ready), dict(state.agents)
    first = iter(firsts)
    for draft in state.chunk:
        lead = draft.events[0]
        if isinstance(lead, InputRejected):
            ready += draft.events
        elif next(first):
            ready += draft.events
            if isinstance(lead, SessionConfigured):
                agents[lead.session_id] = lead.data.agent
        elif isinstance(lead, SessionConfigured):
            agents.pop(lead.session_id, None)
    return _with(state, chunk=(), ready=tuple(ready), agents=agents)
