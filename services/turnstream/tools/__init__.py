"""Tools the tool-executor runs: the contract, the registry, and the built-in file tools."""

from turnstream.tools.base import Tool, ToolContext, ToolError, ToolSpec
from turnstream.tools.builtin import builtin_tools
from turnstream.tools.registry import ToolLoadError, ToolRegistry

__all__ = [
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolLoadError",
    "ToolRegistry",
    "ToolSpec",
    "builtin_tools",
]
