"""The runtime tools' calls (`send_message`, `spawn`): which approved calls a turn may run
now, and why one cannot (a tool failure the model sees: bad arguments, or a limit of
depth, running sub-turns, the tree's budget or hops); `refuse` records those failures,
`turnstream.core.session.outbound` sends the others.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from turnstream.core.commands import AGENT_NAME_PATTERN, MAX_TEXT_CHARS
from turnstream.core.events import (
    Event,
    FailureClass,
    MessageCause,
    MessageDropped,
    MessageDroppedData,
    Stage,
    ToolError,
    ToolInvocationFailed,
    ToolInvocationFailedData,
)
from turnstream.core.subjects import is_reserved_session, is_session_id
from turnstream.core.turn.builder import Builder
from turnstream.core.turn.phases import Ended
from turnstream.core.turn.runtime_tools import is_runtime_tool
from turnstream.core.turn.state import (
    ActiveTurn,
    ChatState,
    ToolCallState,
    TurnConfig,
)
from turnstream.core.turn.tool_call import dispatchable

_AGENT = re.compile(AGENT_NAME_PATTERN)


@dataclass(frozen=True, slots=True)
class Spawned:
    """What a turn's sub-turns hold so far, as its session counts them (the session keeps
    the children: `turnstream.core.session.subturns`); a `spawn` is judged against it."""

    running: int = 0
    """Its sub-turns still running."""
    used: int = 0
    """What they took of its tree's budget: 1 each, and the share each was given."""


NONE_SPAWNED = Spawned()
"""A turn with no sub-turns (a stage's lane: it cannot spawn)."""


def child_session_id(parent: str, invocation_id: str) -> str:
    """The child session a `spawn` call starts: named after its parent where it fits."""
    digest = hashlib.blake2b(invocation_id.encode(), digest_size=6).hexdigest()
    name = f"{parent}:sub-{digest}"
    return name if len(name) <= 128 else f"sub-{digest}"


def runtime_calls(turn: ActiveTurn, config: TurnConfig) -> list[ToolCallState]:
    """Approved `send_message`/`spawn` calls whose turn may run them now (in call order),
    once the tool hooks, if any, let them through."""
    if type(turn.phase) is Ended or turn.abort is not None or turn.interrupt is not None:
        return []
    if turn.stage is not Stage.TOOL_CALL or not turn.stage_open:
        return []
    return [
        c
        for c in dispatchable(turn.calls)
        if is_runtime_tool(c.tool) and (c.hooked or not config.tool_hooks)
    ]


def judged(
    turn: ActiveTurn, config: TurnConfig, spawned: Spawned
) -> list[tuple[ToolCallState, ToolError | None]]:
    """Each runtime call the turn may run now, and why it cannot (None: it can); spawns
    that go out together count against the running-children limit in call order."""
    return [(call, error) for call, error, _ in judged_with_shares(turn, config, spawned)]


def judged_with_shares(
    turn: ActiveTurn, config: TurnConfig, spawned: Spawned
) -> list[tuple[ToolCallState, ToolError | None, int]]:
    """`judged`, with the budget share each spawn that can go would give its child."""
    out: list[tuple[ToolCallState, ToolError | None, int]] = []
    spawning = spent = 0
    for call in runtime_calls(turn, config):
        error = problem(turn, call, config, spawned, spawning, spent)
        share = 0
        if call.tool == "spawn" and error is None:
            share = budget_share(turn, config, spawned, spent)
            spawning, spent = spawning + 1, spent + 1 + share
        out.append((call, error, share))
    return out


def budget_left(turn: ActiveTurn, config: TurnConfig, spawned: Spawned, spent: int = 0) -> int:
    """Sub-turns this turn may still start, below it included."""
    total = turn.budget if turn.budget is not None else config.max_subturns_per_root
    return total - spawned.used - spent


def budget_share(turn: ActiveTurn, config: TurnConfig, spawned: Spawned, spent: int) -> int:
    """What a new child gets of what is left after itself: a fair part, so a tree never
    starts more than its root's budget."""
    left = budget_left(turn, config, spawned, spent) - 1
    return max(left // max(config.max_subturns, 1), 0)


def problem(
    turn: ActiveTurn,
    call: ToolCallState,
    config: TurnConfig,
    spawned: Spawned,
    spawning: int = 0,
    spent: int = 0,
) -> ToolError | None:
    """Why an approved runtime call cannot be run (a tool failure the model sees);
    `spawned`: the turn's sub-turns so far, `spawning`: those about to start before it,
    `spent`: their cost."""
    if config.stage is not None:  # a stage's lane has no outbox: its envelope is the workflow's
        return ToolError(
            error_class=FailureClass.POLICY_DENIED,
            kind="unsupported",
            detail=f"{call.tool} is not available inside a workflow stage",
        )
    if call.tool == "send_message":
        found = _message_problem(call.args)
    else:
        found = _spawn_problem(turn, call.args, config, spawned, spawning, spent)
    if found is None and turn.hops + 1 > config.max_hops:
        return _limit(
            "hop_limit",
            f"this message would be delivery {turn.hops + 1} of its chain; "
            f"TURNSTREAM_MAX_HOPS={config.max_hops}",
        )
    return found


def _invalid(detail: str) -> ToolError:
    return ToolError(
        error_class=FailureClass.INVALID_INPUT, kind="invalid_arguments", detail=detail
    )


def _limit(kind: str, detail: str) -> ToolError:
    return ToolError(error_class=FailureClass.LIMIT_EXCEEDED, kind=kind, detail=detail)


def _message_problem(args: dict[str, Any]) -> ToolError | None:
    to, text = args.get("to"), args.get("text")
    if not isinstance(to, str) or not is_session_id(to) or is_reserved_session(to):
        return _invalid(f"`to` must be a session id (1-128 of [A-Za-z0-9_:-]), not {to!r}")
    if not isinstance(text, str) or not text.strip():
        return _invalid("`text` is required: the message to send")
    if len(text) > MAX_TEXT_CHARS:
        return _invalid(f"`text` is {len(text)} characters; the limit is {MAX_TEXT_CHARS}")
    if not isinstance(args.get("expectReply", False), bool):
        return _invalid("`expectReply` must be true or false")
    return None


def _spawn_problem(
    turn: ActiveTurn,
    args: dict[str, Any],
    config: TurnConfig,
    spawned: Spawned,
    spawning: int,
    spent: int,
) -> ToolError | None:
    task, agent, mode = args.get("task"), args.get("agent"), args.get("mode", "sync")
    if not isinstance(task, str) or not task.strip():
        return _invalid("`task` is required: what the sub-turn must do")
    if len(task) > MAX_TEXT_CHARS:
        return _invalid(f"`task` is {len(task)} characters; the limit is {MAX_TEXT_CHARS}")
    if mode not in ("sync", "async"):
        return _invalid(f"`mode` must be sync or async, not {mode!r}")
    if agent is not None and (not isinstance(agent, str) or not _AGENT.match(agent)):
        return _invalid(f"`agent` must be an agent profile's name, not {agent!r}")
    if agent is not None and config.agents is not None and agent not in config.agents:
        known = ", ".join(sorted(config.agents)) or "none"
        return _invalid(f"there is no agent {agent!r}; known: {known}")
    if turn.depth + 1 > config.max_subturn_depth:
        return _limit(
            "depth_limit",
            f"a sub-turn here would be at depth {turn.depth + 1}; "
            f"TURNSTREAM_MAX_SUBTURN_DEPTH={config.max_subturn_depth}: do the task yourself",
        )
    running = spawning + spawned.running
    if running >= config.max_subturns:
        return _limit(
            "subturn_limit",
            f"{running} sub-turns of this turn are running; TURNSTREAM_MAX_SUBTURNS="
            f"{config.max_subturns}: wait for one to end (spawn sync) or do it yourself",
        )
    if budget_left(turn, config, spawned, spent) < 1:
        return _limit(
            "tree_limit",
            "this turn's tree of sub-turns has started all it may "
            f"(TURNSTREAM_MAX_SUBTURNS_PER_ROOT={config.max_subturns_per_root}): "
            "do the task yourself",
        )
    return None


def refuse(
    b: Builder, state: ChatState, turn: ActiveTurn, config: TurnConfig, spawned: Spawned
) -> list[Event]:
    """The failures of approved runtime calls that cannot run (bad arguments, a limit);
    past the hop limit, the message is `MessageDropped` first."""
    events: list[Event] = []
    for call, error in judged(turn, config, spawned):
        if error is None:
            continue
        if error.kind == "hop_limit":
            to = call.args.get("to") if call.tool == "send_message" else None
            cause: MessageCause = "send_message" if call.tool == "send_message" else "subturn"
            dropped = MessageDroppedData(
                to=str(to or child_session_id(state.session_id, call.invocation_id)),
                reason="hop_limit",
                hops=turn.hops + 1,
                cause=cause,
                invocation_id=call.invocation_id,
            )
            events.append(b.make(MessageDropped, dropped))
        failed = ToolInvocationFailedData(invocation_id=call.invocation_id, error=error)
        events.append(b.make(ToolInvocationFailed, failed))
    return events


__all__ = [
    "NONE_SPAWNED",
    "Spawned",
    "budget_left",
    "budget_share",
    "child_session_id",
    "judged",
    "judged_with_shares",
    "problem",
    "refuse",
    "runtime_calls",
]
