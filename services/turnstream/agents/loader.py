"""Load agent profiles from TURNSTREAM_AGENTS, every problem named with its file and key.

    ---
    name: researcher            # required, the file's name
    description: Reads files and answers with citations.   # required
    provider: scripted          # optional: scripted | anthropic | openai
    model: claude-sonnet-4-5    # optional
    tools: [read_file, list_dir]  # optional allowlist
    securityMode: ask           # optional: auto | ask | allowlist | deny
    maxIterations: 10           # optional, >= 1
    budget: {turnTokens: 200000, sessionUsd: 5}   # optional: also sessionTokens, turnUsd
    ---
    You are a careful researcher. ...   (the system prompt)

Unknown keys are ignored, like a stage file's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

from turnstream.agents.profile import AGENT_NAME, AgentProfile, Provider, SecurityMode
from turnstream.workflows.files import Problem, read_budget, read_frontmatter


class AgentInvalid(ValueError):
    def __init__(self, path: Path, problems: list[Problem]) -> None:
        self.path = path
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"agent profile {path} has {len(problems)} problem(s):\n{lines}")


def find(agents_dir: Path, name: str) -> Path:
    """The profile file of agent `name` (a name, never a path: a sender must not make the
    runtime read a file from elsewhere)."""
    if not AGENT_NAME.match(name):
        raise ValueError(
            f"agent name {name!r} must be a profile's name in TURNSTREAM_AGENTS "
            "(letters, digits, '-', '_'), not a path"
        )
    path = agents_dir / f"{name}.md"
    if not path.is_file():
        known = sorted(p.stem for p in agents_dir.glob("*.md"))
        raise FileNotFoundError(
            f"no agent {name!r} in {agents_dir} (TURNSTREAM_AGENTS); "
            f"known: {', '.join(known) or 'none'}"
        )
    return path


def load(path: Path) -> AgentProfile:
    """The profile in `path`, or `AgentInvalid` listing every problem."""
    problems: list[Problem] = []
    found = read_frontmatter(path, problems)
    if found is None:
        raise AgentInvalid(path, problems)
    raw, body = found

    def bad(key: str, message: str, fix: str) -> None:
        problems.append(Problem(path.name, key, message, fix))

    name = raw.get("name")
    if not isinstance(name, str) or not name:
        bad("name", "required field missing", f"add `name: {path.stem}`")
    elif name != path.stem:
        bad("name", f"{name!r} is not the file's name {path.stem!r}", "rename one to match")
    description = raw.get("description")
    if not isinstance(description, str) or not description.strip():
        bad("description", "required field missing", "add `description: <one line>`")
    provider = _choice(raw, "provider", get_args(Provider), bad)
    mode = _choice(raw, "securityMode", get_args(SecurityMode), bad)
    model = raw.get("model")
    if model is not None and (not isinstance(model, str) or not model):
        bad("model", f"must be a model name, not {model!r}", "write `model: <name>`")
    fallback_model = raw.get("fallbackModel")
    if fallback_model is not None and (not isinstance(fallback_model, str) or not fallback_model):
        bad("fallbackModel", f"must be a model name, not {fallback_model!r}", "e.g. `gpt-4o-mini`")
    fallback_provider = _choice(raw, "fallbackProvider", get_args(Provider), bad)
    tools = raw.get("tools")
    if tools is not None and (
        not isinstance(tools, list) or not all(isinstance(t, str) and t for t in tools)
    ):
        bad("tools", f"must be a list of tool names, not {tools!r}", "write `tools: [read_file]`")
    iterations = raw.get("maxIterations")
    if iterations is not None and (
        isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1
    ):
        bad("maxIterations", f"must be an integer >= 1, not {iterations!r}", "e.g. `10`")
    budget = read_budget(raw.get("budget"), bad)
    if problems:
        raise AgentInvalid(path, problems)
    return AgentProfile(
        name=str(name),
        description=str(description).strip(),
        system_prompt=body.strip(),
        provider=provider,
        model=model,
        tools=tuple(tools) if tools is not None else None,
        security_mode=mode,
        max_iterations=iterations,
        fallback_model=fallback_model,
        fallback_provider=fallback_provider,
        budget=budget,
    )


def load_all(agents_dir: Path) -> tuple[dict[str, AgentProfile], list[AgentInvalid]]:
    """Every profile in `agents_dir` by name, and the files that did not load (a bad file
    never hides the good ones)."""
    profiles: dict[str, AgentProfile] = {}
    invalid: list[AgentInvalid] = []
    for path in sorted(agents_dir.glob("*.md")) if agents_dir.is_dir() else []:
        try:
            profiles[path.stem] = load(path)
        except AgentInvalid as exc:
            invalid.append(exc)
    return profiles, invalid


def _choice(raw: dict[str, Any], key: str, allowed: tuple[str, ...], bad: Any) -> Any:
    value = raw.get(key)
    if value is not None and value not in allowed:
        bad(key, f"{value!r} is not one of {', '.join(allowed)}", f"write `{key}: {allowed[0]}`")
        return None
    return value
