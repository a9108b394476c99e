"""Audit events: what the audit service found wrong in the log (it never changes a turn)."""

from __future__ import annotations

from typing import Literal

from turnstream.core.events.base import EventBase, WireModel

ViolationKind = Literal[
    "duplicate_terminal",
    "turn_overdue",
    "unapproved_tool_run",
    "duplicate_subturn_end",
    "subturn_unended",
    "duplicate_reply",
    "reply_missing",
    "unjustified_approval",
]


class AuditViolationData(WireModel):
    kind: ViolationKind
    """Which invariant was broken: more than one `TurnEnded` for a turn, a turn open past
    its wall-time bound, a tool that ran without a `ToolCallApproved`, a `SubTurnSpawned`
    with more than one `SubTurnEnded` (or none past its deadline), a turn whose input had
    `replyTo` with more than one `MessageSent`/`MessageDropped` for it (or none), a
    `ToolCallApproved` the log does not justify (`turnstream.core.justification`: the
    session's mode, an attached workflow's stage tools or a person's approval)."""
    detail: str
    """One line for people: what was seen."""
    event_id: str | None = None
    """The event that showed the violation (absent when a timer found an overdue turn)."""
    event_seq: int | None = None
    """Its log sequence."""
    invocation_id: str | None = None


class AuditViolation(EventBase):
    type: Literal["AuditViolation"] = "AuditViolation"
    data: AuditViolationData
