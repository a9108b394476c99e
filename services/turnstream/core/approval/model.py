"""The approval rules' state and configuration: the proposals one session still waits on,
its open prompt, and the rules that judge a call."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from turnstream.core.events import (
    Envelope,
    InteractionAnswered,
    SecurityMode,
    StageEnvelope,
    ToolInvocationProposed,
)

Status = Literal["new", "queued", "asking", "decided"]


@dataclass(frozen=True)
class AllowRule:
    """Approve a call whose tool name matches `tool` and each argument its glob."""

    tool: str
    args: dict[str, str] = field(default_factory=dict)

    def matches(self, tool: str, args: Mapping[str, Any]) -> bool:
        if not fnmatch.fnmatchcase(tool, self.tool):
            return False
        return all(
            name in args and fnmatch.fnmatchcase(str(args[name]), pattern)
            for name, pattern in self.args.items()
        )


@dataclass(frozen=True)
class ApprovalConfig:
    default_mode: SecurityMode = "ask"
    allowlist: tuple[AllowRule, ...] = ()
    answer_timeout_s: float = 300.0


@dataclass(frozen=True)
class Call:
    """What the rules read of a proposed call, and what its verdicts are derived from: the
    proposal's id, time and envelope (the turn-runner knows them without the event)."""

    invocation_id: str
    tool: str
    args: dict[str, Any]
    stage: StageEnvelope | None
    proposed_id: str
    proposed_at: datetime
    envelope: Envelope

    @classmethod
    def of(cls, event: ToolInvocationProposed) -> Call:
        d = event.data
        where = Envelope.of(event)
        return cls(d.invocation_id, d.tool, d.args, d.envelope, event.id, event.time, where)


@dataclass(frozen=True)
class Proposal:
    event: ToolInvocationProposed
    status: Status = "new"
    """new: the turn-runner's verdict (`judge`) is to come; queued: a person's answer is."""

    @property
    def invocation_id(self) -> str:
        return self.event.data.invocation_id

    @property
    def call(self) -> Call:
        return Call.of(self.event)


@dataclass(frozen=True)
class OpenInteraction:
    interaction_id: str
    invocation_id: str
    deadline: datetime
    requested_id: str
    answer: InteractionAnswered | None = None


@dataclass(frozen=True)
class ApprovalState:
    session_id: str
    mode: SecurityMode | None = None
    turn_id: str | None = None
    proposals: tuple[Proposal, ...] = ()
    """Proposals still to decide (a stage group's turns propose at once), in call order."""
    open: OpenInteraction | None = None
    decided: frozenset[str] = frozenset()
    """Invocations with a decision in the log: a redelivered proposal of one is not judged
    again."""


def find(state: ApprovalState, invocation_id: str) -> Proposal | None:
    """The proposal of `invocation_id` still to decide, if any."""
    return next((p for p in state.proposals if p.invocation_id == invocation_id), None)
