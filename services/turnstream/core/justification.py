"""Whether the log justifies running a tool call: the tool-executor's check before it runs
one, and the audit's of every `ToolCallApproved` (DESIGN §13, separation of duties).

The turn-runner applies the approval rules itself (`approval.judge`, no hop to another
process), so its NATS user may append `ToolCallApproved`: an approval in the log proves
nothing by itself. A compromised runner could approve a call that waits for a person. The
check re-derives the approval from facts only other services may append
(ops/accounts.conf), the session's `Grounds`:

    SessionConfigured     gateway    the session's security mode, from its agent's profile
    WorkflowAttached      gateway    its workflows' definitions: each stage's allowedTools
    InteractionRequested  approval   a prompt about a call: its tool and arguments
    InteractionAnswered   gateway    a person's answer to a prompt
    StageGranted          approval   a stage's tool outside its allowed tools, granted

A call (the tool and arguments it runs with) is justified, by authority:

    mode         the session's mode is auto (its profile's mode, else the deployment's default)
    allowlist    the mode is allowlist and a rule matches the tool and its arguments
    workflow     a stage of a workflow attached to the session allows the tool
    interaction  a prompt about this invocation, with this tool and these arguments, whose
                 first answer is approve; a stage grant's prompt also has its StageGranted

and by nothing else: the mode the runner recorded (`ToolCallModeInvoked`), the stage
envelope of its proposal and its hooks' changes to the arguments are its own word.
`by_rules` is the cheap part (the executor reads the session's `SessionConfigured` for it,
once); `justify` is all of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, assert_never

from turnstream.core.approval import ApprovalConfig, mode_verdict, session_mode
from turnstream.core.events import (
    Authority,
    InteractionAnswered,
    InteractionRequested,
    SecurityMode,
    SessionConfigured,
    StageGranted,
    ToolInvocationProposed,
    ToolInvocationRequested,
    WorkflowAttached,
)
from turnstream.core.workflow.definition import WorkflowDef

Ground = (
    SessionConfigured | WorkflowAttached | InteractionRequested | InteractionAnswered | StageGranted
)
"""A fact the turn-runner cannot append that an approval may rest on."""
RULE_KINDS = ("SessionConfigured",)
"""What `by_rules` needs read."""
LOG_KINDS = ("WorkflowAttached", "InteractionRequested", "InteractionAnswered", "StageGranted")
"""What `justify` needs read beyond `RULE_KINDS`."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call as it is to run: its invocation, tool and arguments."""

    invocation_id: str
    tool: str
    args: Mapping[str, Any]

    @classmethod
    def requested(cls, event: ToolInvocationRequested) -> ToolCall:
        return cls(event.data.invocation_id, event.data.tool, event.data.args)

    @classmethod
    def proposed(cls, event: ToolInvocationProposed) -> ToolCall:
        return cls(event.data.invocation_id, event.data.tool, event.data.args)


@dataclass(frozen=True, slots=True)
class Prompt:
    """What the approval service asked a person about one invocation."""

    interaction_id: str
    tool: str
    args: Mapping[str, Any]
    grant: bool
    """A workflow stage asked for a tool outside its allowed tools (`grantStageTool`)."""


@dataclass(slots=True)
class Grounds:
    """A session's facts an approval may rest on, folded in place (`evolve`): the audit
    keeps one per session as the log goes by, the executor folds what it read."""

    mode: SecurityMode | None = None
    """The mode its agent's profile gives it (`SessionConfigured`); None: the default's."""
    stage_tools: frozenset[str] = frozenset()
    """Every tool a stage of a workflow attached to the session allows."""
    prompts: dict[str, list[Prompt]] = field(default_factory=dict)
    """By invocation id."""
    answers: dict[str, InteractionAnswered] = field(default_factory=dict)
    """The first answer to each interaction, by interaction id."""
    granted: dict[str, str] = field(default_factory=dict)
    """Invocation id → the tool a `StageGranted` granted it."""

    def settled(self, invocation_id: str) -> None:
        """Forget what was kept about a call that has its verdict (the audit's memory)."""
        for prompt in self.prompts.pop(invocation_id, []):
            self.answers.pop(prompt.interaction_id, None)
        self.granted.pop(invocation_id, None)


def evolve(grounds: Grounds, event: Ground) -> Grounds:
    """Fold one fact into `grounds`, in place; returns it."""
    match event:
        case SessionConfigured():
            grounds.mode = session_mode(grounds.mode, event)
        case WorkflowAttached(data=data):
            grounds.stage_tools |= stage_tools(data.definition)
        case InteractionRequested(data=data):
            prompt = Prompt(data.interaction_id, data.tool, data.args, data.kind != "tool")
            grounds.prompts.setdefault(data.invocation_id, []).append(prompt)
        case InteractionAnswered(data=data):
            grounds.answers.setdefault(data.interaction_id, event)
        case StageGranted(data=data):
            grounds.granted.setdefault(data.invocation_id, data.tool)
        case _:
            assert_never(event)
    return grounds


def fold(grounds: Grounds, events: Iterable[Ground]) -> Grounds:
    """`evolve` each of `events` into `grounds`, in order."""
    for event in events:
        evolve(grounds, event)
    return grounds


def stage_tools(definition: Mapping[str, Any]) -> frozenset[str]:
    """The tools any stage of a workflow definition (`WorkflowAttached.data.definition`)
    allows."""
    stages = WorkflowDef.from_dict(dict(definition)).stages.values()
    return frozenset(tool for stage in stages for tool in stage.allowed_tools)


@dataclass(frozen=True, slots=True)
class Justified:
    authority: Authority
    """Which fact the call runs on: `mode`, `allowlist`, `workflow` or `interaction`."""
    detail: str


@dataclass(frozen=True, slots=True)
class Unjustified:
    reason: str
    """One line for people: what the log lacks."""


Verdict = Justified | Unjustified


def by_rules(call: ToolCall, grounds: Grounds, config: ApprovalConfig) -> Justified | None:
    """The call's justification by the session's security mode alone (auto, or an allowlist
    rule that matches), None when the mode does not allow it without a person."""
    mode = grounds.mode or config.default_mode
    if mode_verdict(mode, call.tool, call.args, config) != "approve":
        return None
    authority: Authority = "allowlist" if mode == "allowlist" else "mode"
    return Justified(authority, f"the session's security mode is {mode} ({_whose(grounds)})")


def justify(call: ToolCall, grounds: Grounds, config: ApprovalConfig) -> Verdict:
    """Whether `grounds` justify running `call`: by the session's mode, a workflow stage's
    allowed tools, or a person's approval of this very call; else why not."""
    ruled = by_rules(call, grounds, config)
    if ruled is not None:
        return ruled
    if call.tool in grounds.stage_tools:
        return Justified("workflow", f"a stage of an attached workflow allows {call.tool}")
    asked = grounds.prompts.get(call.invocation_id, [])
    for prompt in asked:
        if prompt.tool != call.tool or dict(prompt.args) != dict(call.args):
            continue
        answer = grounds.answers.get(prompt.interaction_id)
        if answer is None or answer.data.decision != "approve":
            continue
        if prompt.grant and grounds.granted.get(call.invocation_id) != call.tool:
            continue
        by = answer.data.sender
        return Justified("interaction", f"{by.kind} {by.id} approved it ({prompt.interaction_id})")
    mode = grounds.mode or config.default_mode
    return Unjustified(
        f"the approval of {call.tool} (invocation {call.invocation_id}) is not justified by "
        f"the log: {_why_not(mode, grounds)}, no stage of an attached workflow allows it, and "
        f"{_no_person(call, asked, grounds)}"
    )


def _whose(grounds: Grounds) -> str:
    return "its agent profile's" if grounds.mode is not None else "the deployment's default"


def _why_not(mode: SecurityMode, grounds: Grounds) -> str:
    whose = _whose(grounds)
    match mode:
        case "ask":
            return f"the session's security mode is ask ({whose}): a person decides each call"
        case "deny":
            return f"the session's security mode is deny ({whose})"
        case "allowlist":
            return f"the session's security mode is allowlist ({whose}) and no rule matches"
        case "auto":
            raise AssertionError("auto justifies every call")
        case _:
            assert_never(mode)


def _no_person(call: ToolCall, asked: list[Prompt], grounds: Grounds) -> str:
    if not asked:
        return "no person was asked about this call"
    matching = [p for p in asked if p.tool == call.tool and dict(p.args) == dict(call.args)]
    if not matching:
        return "the person was asked about another tool or other arguments than it runs with"
    answers = [grounds.answers.get(p.interaction_id) for p in matching]
    if any(a is not None and a.data.decision == "approve" for a in answers):
        return "the stage's tool was not granted (no StageGranted)"
    if any(a is not None for a in answers):
        return "the person denied it"
    return "no person has answered the prompt"
