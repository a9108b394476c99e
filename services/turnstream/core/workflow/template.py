"""The stage body template: `{{ctx.*}}` and `{{stage.*}}` placeholders, nothing else.

No conditionals, loops, expressions, `{{env.*}}` or `{{ctx.attempts.*}}`: a placeholder
that is not allowed, or that names a field the context lacks, is an error at Init, never
an empty string.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}|\{%.*?%\}", re.S)
PATH = re.compile(r"^(ctx|stage)((?:\.[A-Za-z_][A-Za-z0-9_]*|\[\d+\])+)$")
SEGMENT = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]")
NOT_ADDRESSABLE = {"attempts", "host"}
STAGE_FIELDS = {"id", "name"}


class TemplateError(ValueError):
    """A placeholder the template engine refuses, with the fix."""


def placeholders(body: str) -> list[str]:
    return [m.group(0) for m in PLACEHOLDER.finditer(body)]


def check(body: str) -> list[str]:
    """Errors of the placeholders' form alone (load time: no context yet)."""
    errors = []
    for match in PLACEHOLDER.finditer(body):
        try:
            _parse(match)
        except TemplateError as exc:
            errors.append(str(exc))
    return errors


def render(body: str, ctx: dict[str, Any], stage: dict[str, Any]) -> str:
    """The body with every placeholder replaced; `TemplateError` on the first bad one."""

    def value(match: re.Match[str]) -> str:
        root, path = _parse(match)
        current: Any = ctx if root == "ctx" else stage
        walked = root
        for key in path:
            if isinstance(key, int):
                if not isinstance(current, list) or key >= len(current):
                    raise TemplateError(
                        f"{match.group(0)}: {walked} has no element [{key}] "
                        f"(it has {len(current) if isinstance(current, list) else 0})"
                    )
                walked += f"[{key}]"
            else:
                if not isinstance(current, dict) or key not in current:
                    raise TemplateError(
                        f"{match.group(0)}: {walked} has no field {key!r}; set it in the "
                        "workflow ctx (`--ctx`) or fix the placeholder"
                    )
                walked += f".{key}"
            current = current[key]
        if current is None:
            return ""
        if isinstance(current, str):
            return current
        return orjson.dumps(current).decode()

    return PLACEHOLDER.sub(value, body)


def _parse(match: re.Match[str]) -> tuple[str, list[str | int]]:
    text = match.group(0)
    inner = match.group(1)
    if inner is None:
        raise TemplateError(f"{text}: template blocks are not supported; split the stage")
    inner = inner.strip()
    if inner.startswith("env.") or inner == "env":
        raise TemplateError(
            f"{text}: env and settings values never reach the prompt; pass what the stage "
            "needs in the workflow ctx"
        )
    found = PATH.match(inner)
    if not found:
        raise TemplateError(
            f"{text}: only {{{{ctx.<field>}}}}, {{{{ctx.upstream[i].<field>}}}}, "
            "{{ctx.workflowRunId}}, {{ctx.stageExecutionId}}, {{stage.id}} and "
            "{{stage.name}} are allowed (no expressions, filters or conditionals)"
        )
    root = found.group(1)
    path: list[str | int] = [
        int(index) if index else name for name, index in SEGMENT.findall(found.group(2))
    ]
    first = path[0]
    if root == "stage":
        if len(path) != 1 or first not in STAGE_FIELDS:
            raise TemplateError(f"{text}: only {{{{stage.id}}}} and {{{{stage.name}}}} exist")
    elif first in NOT_ADDRESSABLE:
        raise TemplateError(
            f"{text}: ctx.{first} is not template-addressable (the body is rendered once, "
            "at Init); per-attempt information reaches the model as a message"
        )
    elif isinstance(first, int):
        raise TemplateError(f"{text}: ctx is not a list")
    elif first == "upstream" and (len(path) < 2 or not isinstance(path[1], int)):
        raise TemplateError(f"{text}: index upstream, e.g. {{{{ctx.upstream[0].verdict}}}}")
    return root, path
