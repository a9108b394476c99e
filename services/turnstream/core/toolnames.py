"""Tool names that are part of the contract: MCP tools' `<server>__<tool>` and the names a
workflow stage's `completionTool` may not take."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from turnstream.core.turn.runtime_tools import RUNTIME_TOOLS

MCP_SEP = "__"
"""Between an MCP server's name and its tool's: `<server>__<tool>`."""

RESERVED: frozenset[str] = frozenset(RUNTIME_TOOLS)
"""Names the runtime keeps for tools of its own (`send_message`, `spawn`): offered to every
session beside the registered tools, though no executor registers them."""


def mcp_name(server: str, tool: str) -> str:
    """The manifest name of MCP server `server`'s tool `tool`."""
    return f"{server}{MCP_SEP}{tool}"


def completion_tool_clash(
    name: str, tools: Collection[str], mcp_servers: Iterable[str] = ()
) -> str | None:
    """Why `name` cannot be a stage's completion tool, or None when it can.

    The completion channel is never registered, so a tool of the same name would make a
    call ambiguous: registered tools (built-in, entry points, MCP), the runtime's reserved
    names, and every name in a configured MCP server's namespace (a server may add a tool
    at any time, `notifications/tools/list_changed`) are taken."""
    if name in RESERVED:
        return f"{name!r} is reserved: the runtime offers a tool of that name"
    servers = [s for s in mcp_servers if name.startswith(mcp_name(s, ""))]
    if name in tools:
        owner = f" (MCP server {servers[0]!r})" if servers else ""
        return f"{name!r} collides with a registered tool{owner}"
    if servers:
        return (
            f"{name!r} is in MCP server {servers[0]!r}'s namespace "
            f"({mcp_name(servers[0], '*')}): the server may offer a tool of that name"
        )
    return None
