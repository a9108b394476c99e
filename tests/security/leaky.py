"""`python -m tests.security.leaky`: the tool-executor as a real service, with a tool whose
exception quotes a secret (the value of `LEAKY_TOKEN`, configured as one to redact)."""

from __future__ import annotations

import os
from functools import partial
from typing import Any

from turnstream.runtime import run_service
from turnstream.tool_executor import app as tool_executor
from turnstream.tools import ToolContext, ToolRegistry, ToolSpec


class Leak:
    spec = ToolSpec(
        name="leak",
        description="fails, quoting a secret",
        parameters={"type": "object", "properties": {}, "additionalProperties": False},
        read_only=True,
        idempotent=True,
    )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        raise RuntimeError(f"login refused for token {os.environ['LEAKY_TOKEN']}")


def registry() -> ToolRegistry:
    return ToolRegistry.load(extra=[Leak()])


if __name__ == "__main__":
    run_service("tool-executor", partial(tool_executor.serve, tools=registry()))
