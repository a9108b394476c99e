"""Definition files authors write (workflow stages, agent profiles): YAML, or markdown with
a YAML frontmatter block, read with every problem collected so an author fixes all at once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from turnstream.core.events import AgentBudget


@dataclass(frozen=True)
class Problem:
    file: str
    field: str
    message: str
    fix: str
    code: str = "Validation"

    def __str__(self) -> str:
        return f"{self.file}: {self.field}: {self.message} (fix: {self.fix})"


def read_yaml(path: Path, text: str | None, problems: list[Problem]) -> dict[str, Any] | None:
    if text is None:
        problems.append(Problem(path.name, "-", "file missing", f"create {path}"))
        return None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        problems.append(Problem(path.name, "-", f"not valid YAML: {exc}", "fix the syntax"))
        return None
    if not isinstance(raw, dict):
        problems.append(Problem(path.name, "-", "must be a mapping", "write `key: value` lines"))
        return None
    return raw


def read_frontmatter(path: Path, problems: list[Problem]) -> tuple[dict[str, Any], str] | None:
    text = path.read_text()
    if not text.startswith("---"):
        problems.append(
            Problem(path.name, "-", "no YAML frontmatter", "start the file with a `---` block")
        )
        return None
    parts = text.split("\n---", 1)
    if len(parts) != 2:
        problems.append(Problem(path.name, "-", "frontmatter not closed", "end it with `---`"))
        return None
    head = parts[0].removeprefix("---")
    raw = read_yaml(path, head, problems)
    body = parts[1].split("\n", 1)[1] if "\n" in parts[1] else ""
    return (raw, body.strip() + "\n") if raw is not None else None


def read_budget(raw: Any, bad: Callable[[str, str, str], None]) -> AgentBudget | None:
    """A `budget:` mapping (an agent profile's, a stage's): `turnTokens`, `sessionTokens`,
    `turnUsd`, `sessionUsd`; a problem named through `bad(key, message, fix)`."""
    if raw is None:
        return None
    fix = "e.g. `budget: {turnTokens: 200000, sessionUsd: 5}`"
    if not isinstance(raw, dict):
        bad("budget", f"must be a mapping, not {raw!r}", fix)
        return None
    try:
        return AgentBudget.model_validate(raw)
    except ValidationError as exc:
        wrong = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        bad("budget", wrong, fix + " (turnTokens, sessionTokens, turnUsd, sessionUsd)")
        return None
