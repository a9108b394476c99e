"""The approval events a session's state calls for: a verdict with no person (`judge`,
by the session's security mode), a prompt (`InteractionRequested`), and the verdict that
follows a prompt's answer or its deadline (`next_verdicts`). Event ids are derived from
the invocation they decide."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Literal, assert_never

from turnstream.core.approval.model import (
    ApprovalConfig,
    ApprovalState,
    Call,
    Proposal,
    find,
)
from turnstream.core.events import (
    Authority,
    Event,
    EventBase,
    InteractionRequested,
    InteractionRequestedData,
    SecurityMode,
    Sender,
    StageGranted,
    StageGrantedData,
    ToolCallApproved,
    ToolCallApprovedData,
    ToolCallDenied,
    ToolCallDeniedData,
    ToolCallModeInvoked,
    ToolCallModeInvokedData,
    stamp,
)
from turnstream.core.ids import derived_id


def judge(
    call: Call, mode: SecurityMode | None, config: ApprovalConfig, now: datetime, source: str
) -> list[Event]:
    """The verdict on a proposed call that needs no person, in the session's `mode` (None:
    not fixed yet, the default's): `ToolCallModeInvoked` and `ToolCallApproved` or
    `ToolCallDenied`; inside a workflow stage, `ToolCallApproved{workflow}`. A call that
    needs a person gets `ToolCallModeInvoked{ask}` (the approval service asks); a stage's
    call outside its allowed tools gets nothing (the approval service asks for a grant)."""
    if call.stage is not None:  # inside a workflow stage's envelope: the mode gate is bypassed
        if call.tool not in call.stage.allowed_tools:
            return []
        return [_approved(call, "workflow", now, source, reason=f"stage {call.stage.stage}")]
    mode = mode or config.default_mode
    first_id = derived_id(call.invocation_id, "mode", call.proposed_at)
    verdict = mode_verdict(mode, call.tool, call.args, config)
    events: list[Event] = []
    if verdict == "approve":
        authority: Authority = "allowlist" if mode == "allowlist" else "mode"
        events = [_approved(call, authority, now, source, cause=first_id)]
    elif verdict == "deny":
        reason = "the session's security mode is deny"
        events = [_denied(call, "mode", reason, now, source, cause=first_id)]
    invoked = ToolCallModeInvokedData(invocation_id=call.invocation_id, mode=mode, verdict=verdict)
    first = _make(call, ToolCallModeInvoked, invoked, now, source, "mode", call.proposed_id)
    return [first, *events]


Verdict = Literal["approve", "deny", "ask"]


def mode_verdict(
    mode: SecurityMode, tool: str, args: Mapping[str, Any], config: ApprovalConfig
) -> Verdict:
    """What a session's security `mode` says of a call with no person: `approve` (auto, or
    allowlist with a rule that matches the tool and its arguments), `deny`, or `ask` (a
    person decides). The turn-runner judges by it (`judge`), the tool-executor and the
    audit check approvals by it (`turnstream.core.justification`)."""
    match mode:
        case "auto":
            return "approve"
        case "deny":
            return "deny"
        case "allowlist":
            matched = any(rule.matches(tool, args) for rule in config.allowlist)
            return "approve" if matched else "ask"
        case "ask":
            return "ask"
        case _:
            assert_never(mode)


def next_verdicts(
    state: ApprovalState,
    config: ApprovalConfig,
    now: datetime,
    source: str,
    judging: bool,
) -> list[Event]:
    """The next approval events `state` calls for: a verdict on a new proposal (when
    `judging`: the turn-runner's part), else the open prompt's verdict, else a prompt."""
    new = next((p for p in state.proposals if p.status == "new"), None) if judging else None
    if new is not None:
        return judge(new.call, state.mode, config, now, source)
    if state.open is not None:
        proposal = find(state, state.open.invocation_id)
        if proposal is None:
            return []
        answer = state.open.answer
        envelope = proposal.event.data.envelope
        authority: Authority = "interaction" if envelope is None else "workflow"
        grant = "GrantDenied: " if envelope is not None else ""
        if answer is not None:
            by, why = answer.data.sender, answer.data.reason
            if answer.data.decision == "approve":
                approved = _approved(proposal.call, authority, now, source, by, why, answer.id)
                if envelope is None:
                    return [approved]
                return [_granted(proposal, now, source, by, answer.id), approved]
            reason = grant + (why or f"{by.kind} {by.id} denied it")
            denied = _denied(proposal.call, authority, reason, now, source, by=by, cause=answer.id)
            return [denied]
        if now >= state.open.deadline:
            return [
                _denied(
                    proposal.call,
                    authority,
                    f"{grant}no answer by the deadline ({config.answer_timeout_s:.0f} s)",
                    now,
                    source,
                    timed_out=True,
                    cause=state.open.requested_id,
                )
            ]
        return []
    queued = next((p for p in state.proposals if p.status == "queued"), None)
    if queued is not None:
        return [_ask(queued, config, now, source)]
    return []


def _ask(proposal: Proposal, config: ApprovalConfig, now: datetime, source: str) -> Event:
    data = proposal.event.data
    interaction_id = derived_id(data.invocation_id, "interaction", proposal.event.time)
    args = ", ".join(f"{k}={v!r}" for k, v in data.args.items())
    prompt = f"allow {data.tool}({args})?"
    if data.envelope is not None:
        prompt = (
            f"stage {data.envelope.stage} wants {data.tool}({args}), outside its allowed "
            f"tools {data.envelope.allowed_tools}: grant it?"
        )
    requested = InteractionRequestedData(
        interaction_id=interaction_id,
        invocation_id=data.invocation_id,
        tool=data.tool,
        args=data.args,
        deadline=now + timedelta(seconds=config.answer_timeout_s),
        prompt=prompt,
        kind="tool" if data.envelope is None else "grantStageTool",
    )
    call = proposal.call
    return _make(call, InteractionRequested, requested, now, source, "ask", proposal.event.id)


def _approved(
    call: Call,
    authority: Authority,
    now: datetime,
    source: str,
    by: Sender | None = None,
    reason: str | None = None,
    cause: str | None = None,
) -> Event:
    data = ToolCallApprovedData(
        invocation_id=call.invocation_id, authority=authority, answered_by=by, reason=reason
    )
    return _make(call, ToolCallApproved, data, now, source, "decision", cause)


def _granted(proposal: Proposal, now: datetime, source: str, by: Sender, cause: str) -> Event:
    data = proposal.event.data
    assert data.envelope is not None
    granted = StageGrantedData(
        stage=data.envelope.stage,
        stage_execution_id=data.envelope.stage_execution_id,
        tool=data.tool,
        invocation_id=data.invocation_id,
        answered_by=by,
    )
    return _make(proposal.call, StageGranted, granted, now, source, "grant", cause)


def _denied(
    call: Call,
    authority: Authority,
    reason: str,
    now: datetime,
    source: str,
    *,
    by: Sender | None = None,
    timed_out: bool = False,
    cause: str | None = None,
) -> Event:
    data = ToolCallDeniedData(
        invocation_id=call.invocation_id, authority=authority, reason=reason,
        timed_out=timed_out, answered_by=by,
    )  # fmt: skip
    return _make(call, ToolCallDenied, data, now, source, "decision", cause)


def _make(
    call: Call,
    cls: type[EventBase],
    data: Any,
    now: datetime,
    source: str,
    purpose: str,
    cause: str | None,
) -> Event:
    event_id = derived_id(call.invocation_id, purpose, call.proposed_at)
    cause = cause or call.proposed_id
    event = stamp(
        cls, data, call.envelope, event_id=event_id, time=now, source=source, causation_id=cause
    )
    return event  # type: ignore[return-value]
