"""The tool contract: what a tool declares, what it is given, and how it fails."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from turnstream.core.turn import ToolInfo

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""Tool names as every provider accepts them."""


@dataclass(frozen=True)
class ToolSpec:
    """What the model is told about a tool, and how the executor may run it."""

    name: str
    """Unique in a registry; matches `TOOL_NAME`."""
    description: str
    """Shown to the model."""
    parameters: dict[str, Any]
    """JSON Schema (Draft 2020-12, `type: object`) of the arguments."""
    read_only: bool
    """Changes nothing outside the call (safe to run without approval in most modes)."""
    idempotent: bool
    """Running it twice with the same arguments has the effect of running it once."""
    timeout_s: float = 30.0
    """The executor abandons the call after this long."""

    def __post_init__(self) -> None:
        if not TOOL_NAME.fullmatch(self.name):
            raise ValueError(f"tool name {self.name!r} must match {TOOL_NAME.pattern}")
        if not self.timeout_s > 0:
            raise ValueError(f"tool {self.name!r}: timeout_s must be > 0, got {self.timeout_s}")

    def info(self) -> ToolInfo:
        """What the turn core knows of the tool, and the manifest lists."""
        return ToolInfo(
            self.name,
            self.description,
            self.parameters,
            self.read_only,
            self.idempotent,
            self.timeout_s,
        )


@dataclass(frozen=True)
class ToolContext:
    """What one invocation may use besides its arguments."""

    workspace: Path
    """The directory every file tool is confined to (resolved, absolute)."""
    session_id: str
    invocation_id: str
    attachment: Callable[[str], Awaitable[tuple[str, bytes] | None]] | None = None
    """`(media type, bytes)` of this session's attachment by name, None when it has none
    of that name (`read_attachment`)."""


class ToolError(Exception):
    """An expected tool failure; becomes ToolInvocationFailed{error: {class, kind, detail}}."""

    def __init__(self, kind: str, detail: str) -> None:
        # Both go to Exception.args so the error pickles and reprs faithfully.
        super().__init__(kind, detail)
        self.kind = kind
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


class Tool(Protocol):
    """A tool the executor can run; `run` gets arguments already valid for `spec.parameters`."""

    spec: ToolSpec

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        """The result text for the model; raises `ToolError` for expected failures."""
        ...
