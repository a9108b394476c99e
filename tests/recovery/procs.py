"""`python -m tests.recovery.procs <service>`: a real service, plus tools that count runs.

`count_run` appends a line to a workspace file, then waits `seconds` (a side effect that
must happen at most once); `count_run_idempotent` is the same, declared idempotent.
"""

from __future__ import annotations

import asyncio
import sys
from functools import partial
from pathlib import Path
from typing import Any

from turnstream.approval import app as approval
from turnstream.audit import app as audit
from turnstream.gateway import app as gateway
from turnstream.runtime import run_service
from turnstream.tool_executor import app as tool_executor
from turnstream.tools import ToolContext, ToolRegistry, ToolSpec
from turnstream.turn_runner import app as turn_runner

PARAMETERS = {
    "type": "object",
    "properties": {"file": {"type": "string"}, "seconds": {"type": "number"}},
    "required": ["file"],
    "additionalProperties": False,
}


class CountRun:
    def __init__(self, name: str, idempotent: bool) -> None:
        self.spec = ToolSpec(
            name=name,
            description="append a line to a file, then wait",
            parameters=PARAMETERS,
            read_only=False,
            idempotent=idempotent,
            timeout_s=120,
        )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        count(ctx.workspace / args["file"], ctx.invocation_id)
        await asyncio.sleep(float(args.get("seconds", 0)))
        return f"counted in {args['file']}"


def count(path: Path, invocation_id: str) -> None:
    with open(path, "a") as out:
        out.write(f"{invocation_id}\n")


def registry() -> ToolRegistry:
    return ToolRegistry.load(
        extra=[CountRun("count_run", False), CountRun("count_run_idempotent", True)]
    )


def main() -> None:
    service = sys.argv[1]
    if service == "http":  # the HTTP face: its own entry point (uvicorn, its own signals)
        from turnstream.http.app import main as http_main

        http_main()
        return
    serves = {
        "gateway": partial(gateway.serve, tools=registry()),
        "approval": approval.serve,
        "audit": audit.serve,
        "turn_runner": partial(turn_runner.serve, tools=registry()),
        "tool_executor": partial(tool_executor.serve, tools=registry()),
    }
    run_service(service.replace("_", "-"), serves[service])


if __name__ == "__main__":
    main()
