"""The turn state machine of one session: `evolve` folds events, `decide` says what's next.

`evolve`, `fold` and `decide` are the session-level ones: a session with a workflow runs
its stage turns as lanes (`turnstream.core.workflow.run`); without one, they are the turn's.
"""

from __future__ import annotations

from pydantic import TypeAdapter

from turnstream.core.turn.decide import (
    awaiting_stage_hooks,
    compose_request,
    needs_provider_call,
    on_hook_verdicts,
    on_provider_result,
    on_stage_hooks,
    on_tool_call_ready,
    stage_hook_text,
)
from turnstream.core.turn.state import (
    STAGE_HOOK_POINTS,
    ActiveTurn,
    Context,
    Decision,
    HookVerdict,
    Message,
    PendingInput,
    ProviderFailure,
    ProviderOutcome,
    ProviderRequest,
    ProviderSuccess,
    Retry,
    SessionState,
    StageHookVerdict,
    ToolCall,
    ToolCallState,
    ToolInfo,
    TurnConfig,
)
from turnstream.core.turn.tool_call import awaiting_hooks, dispatchable

# The session-level fold and decider: a session may run a workflow, whose stage turns are
# lanes of this package's turns (`turnstream.core.workflow` imports this package first).
from turnstream.core.workflow.fold import evolve, fold
from turnstream.core.workflow.run import decide

_STATE_ADAPTER: TypeAdapter[SessionState] = TypeAdapter(SessionState)


def state_to_json(state: SessionState) -> bytes:
    """The session state as JSON (the runner's status API, snapshots, comparisons)."""
    return _STATE_ADAPTER.dump_json(state)


def state_from_json(data: bytes) -> SessionState:
    return _STATE_ADAPTER.validate_json(data)


__all__ = [
    "STAGE_HOOK_POINTS",
    "ActiveTurn",
    "Context",
    "Decision",
    "HookVerdict",
    "Message",
    "PendingInput",
    "ProviderFailure",
    "ProviderOutcome",
    "ProviderRequest",
    "ProviderSuccess",
    "Retry",
    "SessionState",
    "StageHookVerdict",
    "ToolCall",
    "ToolCallState",
    "ToolInfo",
    "TurnConfig",
    "awaiting_hooks",
    "awaiting_stage_hooks",
    "compose_request",
    "decide",
    "dispatchable",
    "evolve",
    "fold",
    "needs_provider_call",
    "on_hook_verdicts",
    "on_provider_result",
    "on_stage_hooks",
    "on_tool_call_ready",
    "stage_hook_text",
    "state_from_json",
    "state_to_json",
]
