"""Agent profiles (DESIGN §11): `agents/<name>.md`, a YAML frontmatter and a system prompt."""

from turnstream.agents.loader import AgentInvalid, find, load, load_all
from turnstream.agents.profile import AGENT_NAME, AgentProfile

__all__ = ["AGENT_NAME", "AgentInvalid", "AgentProfile", "find", "load", "load_all"]
