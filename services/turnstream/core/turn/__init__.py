"""The turn state machine: a turn's stages as a fold (`evolve`) and steps (`decide_turn`).

The state here is a chat's (`ChatState`): the session's own, or a workflow stage's lane.
The session-level state, fold and decider, which run a workflow's stage turns as lanes of
these turns, are `turnstream.core.session`'s: import `SessionState`, `evolve`, `fold` and
`follow_session` from there (`decider.decide_session` takes the session's inputs).
"""

from __future__ import annotations

from turnstream.core.turn.answers import (
    on_hook_verdicts,
    on_provider_result,
    on_stage_hooks,
    on_tool_call_ready,
)
from turnstream.core.turn.decide import needs_provider_call
from turnstream.core.turn.hooks import HookPoint, HookVerdict, StageHookVerdict
from turnstream.core.turn.interceptors import (
    HookSubject,
    awaiting_stage_hooks,
    hook_subject,
)
from turnstream.core.turn.provider import (
    ProviderFailure,
    ProviderOutcome,
    ProviderRequest,
    ProviderSuccess,
    Retry,
)
from turnstream.core.turn.state import (
    ActiveTurn,
    ChatState,
    Context,
    Message,
    PendingInput,
    ToolCall,
    ToolCallState,
    ToolInfo,
    TurnConfig,
)
from turnstream.core.turn.steps import compose_request
from turnstream.core.turn.tool_call import awaiting_hooks, dispatchable

__all__ = [
    "ActiveTurn",
    "ChatState",
    "Context",
    "HookPoint",
    "HookSubject",
    "HookVerdict",
    "Message",
    "PendingInput",
    "ProviderFailure",
    "ProviderOutcome",
    "ProviderRequest",
    "ProviderSuccess",
    "Retry",
    "StageHookVerdict",
    "ToolCall",
    "ToolCallState",
    "ToolInfo",
    "TurnConfig",
    "awaiting_hooks",
    "awaiting_stage_hooks",
    "compose_request",
    "dispatchable",
    "hook_subject",
    "needs_provider_call",
    "on_hook_verdicts",
    "on_provider_result",
    "on_stage_hooks",
    "on_tool_call_ready",
]
