"""What an agent profile says: who the agent is and what its sessions may use."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from turnstream.core.commands import AGENT_NAME_PATTERN

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
