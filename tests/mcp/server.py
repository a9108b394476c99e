"""A small MCP server for the tests, written with the SDK: `python server.py stdio` or
`python server.py http PORT` (streamable HTTP on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import os
import sys

from mcp.server.fastmcp import Context, FastMCP
from mcp.types import ToolAnnotations

server = FastMCP(
    "turnstream-test",
    host="127.0.0.1",
    port=int(sys.argv[2]) if len(sys.argv) > 2 else 8000,
    log_level="WARNING",
)


@server.tool(annotations=ToolAnnotations(readOnlyHint=True), description="Echo the text back.")
def echo(text: str) -> str:
    return f"echo: {text}"


@server.tool(annotations=ToolAnnotations(idempotentHint=True), description="Write a note.")
def write_note(text: str) -> str:
    return f"noted: {text}"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True), description="Always fails.")
def fail(why: str) -> str:
    raise ValueError(f"failing on purpose: {why}")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True), description="This server's pid.")
def pid() -> str:
    return str(os.getpid())


@server.tool(annotations=ToolAnnotations(readOnlyHint=True), description="Sleep a while.")
async def sleep(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "slept"


@server.tool(description="The secret env var the server was started with.")
def secret_env() -> str:
    return os.environ.get("TEST_TOKEN", "(unset)")


@server.tool(description="Add a tool named `extra` and tell the client its tools changed.")
async def grow(ctx: Context) -> str:  # type: ignore[type-arg]
    def extra() -> str:
        return "extra here"

    server.add_tool(extra, name="extra", annotations=ToolAnnotations(readOnlyHint=True))
    await ctx.session.send_tool_list_changed()
    return "grown"


@server.tool(description="Has a broken input schema.")
def broken(x: int) -> str:
    return str(x)


# a schema that is not valid JSON Schema ("type": 12): the client must skip this tool
server._tool_manager._tools["broken"].parameters = {
    "type": "object",
    "properties": {"x": {"type": 12}},
}

if __name__ == "__main__":
    server.run("stdio" if sys.argv[1] == "stdio" else "streamable-http")
