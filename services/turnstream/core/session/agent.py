"""A session's agent (`SessionConfigured`) applied to its turns: the runtime's tools
(`turnstream.core.turn.runtime_tools`) offered beside the registered ones, then the
profile's allowlist, model, bound and system prompt; and the session's security mode.
"""

from __future__ import annotations

from turnstream.core.events import SecurityMode, SessionConfiguredData
from turnstream.core.immutable import with_changes
from turnstream.core.turn.runtime_tools import RUNTIME_TOOLS
from turnstream.core.turn.state import TurnConfig

_APPLIED: dict[
    tuple[int, int, SecurityMode | None],
    tuple[TurnConfig, SessionConfiguredData | None, TurnConfig],
] = {}
"""`with_agent`'s answers by the identity of what it was given: the shell hands every
decision the same deployment configuration, and a session keeps its agent record, so
each decision need not copy the configuration anew (the objects are kept with the
answer: an id is not reused while they live)."""
APPLIED_KEPT = 256


def with_agent(
    config: TurnConfig, agent: SessionConfiguredData | None, mode: SecurityMode | None = None
) -> TurnConfig:
    """The turn configuration of a session of `agent` (None: the default agent): the
    runtime's tools offered beside the registered ones, then the profile's allowlist,
    model, bound and system prompt; its calls judged in the session's fixed `mode` (None:
    the deployment's default)."""
    key = (id(config), id(agent), mode)
    kept = _APPLIED.get(key)
    if kept is not None and kept[0] is config and kept[1] is agent:
        return kept[2]
    if len(_APPLIED) >= APPLIED_KEPT:
        _APPLIED.clear()
    applied = _APPLIED[key] = (config, agent, _applied(config, agent, mode))
    return applied[2]


def _applied(
    config: TurnConfig, agent: SessionConfiguredData | None, mode: SecurityMode | None
) -> TurnConfig:
    rules = config.approval
    if mode is not None and rules is not None and rules.default_mode != mode:
        config = with_changes(config, approval=with_changes(rules, default_mode=mode))
    tools = config.tools
    if not any(t.name in RUNTIME_TOOLS for t in tools):
        tools = (*tools, *RUNTIME_TOOLS.values())
    if agent is None:
        return config if tools is config.tools else with_changes(config, tools=tools)
    if agent.tools is not None:
        allowed = set(agent.tools)
        tools = tuple(t for t in tools if t.name in allowed)
    changes: dict[str, object] = {"tools": tools, "agent": agent.agent}
    if agent.provider is not None:
        changes["provider"] = agent.provider
    if agent.model is not None:
        changes["model"] = agent.model
    if agent.max_iterations is not None:
        changes["max_iterations"] = agent.max_iterations
    if agent.system_prompt:
        changes["system_prompt"] = agent.system_prompt
    if agent.fallback_model is not None:
        own = agent.provider or config.provider
        changes["fallback"] = (agent.fallback_provider or own, agent.fallback_model)
    if agent.budget is not None:
        mine = agent.budget.model_dump(exclude_none=True)
        changes["budget"] = with_changes(config.budget, **mine)
    return with_changes(config, **changes)
