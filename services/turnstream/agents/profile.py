"""What an agent profile says: who the agent is and what its sessions may use."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from turnstream.core.commands import AGENT_NAME_PATTERN
from turnstream.core.events import AgentBudget

AGENT_NAME = re.compile(AGENT_NAME_PATTERN)
"""An agent's name: its file's name in TURNSTREAM_AGENTS, never a path."""

SecurityMode = Literal["auto", "ask", "allowlist", "deny"]
Provider = Literal["scripted", "anthropic", "openai"]


@dataclass(frozen=True, slots=True)
class AgentProfile:
    name: str
    description: str
    system_prompt: str
    """The markdown body: the system prompt of the agent's sessions."""
    provider: Provider | None = None
    """None: the deployment's provider (TURNSTREAM_PROVIDER)."""
    model: str | None = None
    tools: tuple[str, ...] | None = None
    """The tools its sessions are offered (an allowlist); None: every registered tool."""
    security_mode: SecurityMode | None = None
    max_iterations: int | None = None
    fallback_model: str | None = None
    """The model its turns continue on when theirs keeps failing (else the deployment's)."""
    fallback_provider: Provider | None = None
    """The fallback model's provider; None: the agent's own."""
    budget: AgentBudget | None = None
    """What its turns and sessions may spend (`budget: {turnTokens, sessionUsd, …}`)."""

    def summary(self) -> dict[str, Any]:
        """The profile as listings show it (`turnstream agents --json`, `/v1/agents`)."""
        return {
            "name": self.name,
            "description": self.description,
            "provider": self.provider,
            "model": self.model,
            "tools": list(self.tools) if self.tools is not None else None,
            "securityMode": self.security_mode,
            "maxIterations": self.max_iterations,
            "budget": self.budget.model_dump(by_alias=True, exclude_none=True)
            if self.budget
            else None,
        }
