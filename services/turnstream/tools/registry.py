"""The tool registry: lookup, argument validation, and loading tools from entry points."""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from importlib import metadata
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from turnstream.tools.base import Tool, ToolSpec
from turnstream.tools.builtin import builtin_tools

MAX_ERROR_CHARS = 300
"""Validation messages quote the offending value; a huge one must not flood the model."""


class ToolLoadError(RuntimeError):
    """A tool entry point could not be loaded or did not give Tools."""


def _describe(tool: object) -> str:
    cls = type(tool)
    return f"{cls.__module__}.{cls.__qualname__}"


def _check_tool(tool: object) -> Tool:
    spec = getattr(tool, "spec", None)
    if inspect.isclass(tool) or not isinstance(spec, ToolSpec):
        raise TypeError(f"{tool!r} is not a Tool: it needs a `spec` attribute of type ToolSpec")
    if not inspect.iscoroutinefunction(getattr(tool, "run", None)):
        raise TypeError(f"tool {spec.name!r} ({_describe(tool)}): `run` must be an async method")
    if spec.parameters.get("type") != "object":
        raise TypeError(f"tool {spec.name!r}: parameters must be a JSON Schema of type 'object'")
    try:
        Draft202012Validator.check_schema(spec.parameters)
    except SchemaError as exc:
        msg = f"tool {spec.name!r}: parameters are not valid JSON Schema: {exc.message}"
        raise TypeError(msg) from exc
    return tool  # type: ignore[return-value]


def _location(path: Iterable[Any]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _clip(text: str) -> str:
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


class ToolRegistry:
    """The tools one executor offers, by name."""

    def __init__(self, tools: Iterable[Tool]) -> None:
        self._tools: dict[str, Tool] = {}
        self._validators: dict[str, Any] = {}
        for tool in tools:
            name = _check_tool(tool).spec.name
            if name in self._tools:
                raise ValueError(
                    f"duplicate tool name {name!r}: {_describe(self._tools[name])} and "
                    f"{_describe(tool)}; rename one or leave one out"
                )
            self._tools[name] = tool
            self._validators[name] = Draft202012Validator(tool.spec.parameters)

    def get(self, name: str) -> Tool | None:
        """The tool called `name`, if registered."""
        return self._tools.get(name)

    def names(self) -> list[str]:
        """Registered tool names, sorted."""
        return sorted(self._tools)

    def specs(self) -> list[ToolSpec]:
        """Specs of all registered tools, sorted by name."""
        return [self._tools[name].spec for name in self.names()]

    def validate_args(self, name: str, args: Any) -> list[str]:
        """Readable errors of `args` against the tool's schema; empty when valid."""
        validator = self._validators.get(name)
        if validator is None:
            return [f"unknown tool {name!r}; known: {', '.join(self.names())}"]
        errors = sorted(
            validator.iter_errors(args), key=lambda e: ([str(p) for p in e.path], e.message)
        )
        return [
            _clip(f"{loc}: {e.message}" if (loc := _location(e.path)) else e.message)
            for e in errors
        ]

    @classmethod
    def load(
        cls, *, extra: Iterable[Tool] = (), entry_point_group: str = "turnstream.tools"
    ) -> ToolRegistry:
        """The built-in tools, every tool from the entry point group, and `extra`."""
        loaded: list[Tool] = []
        for ep in sorted(metadata.entry_points(group=entry_point_group), key=lambda e: e.name):
            loaded.extend(_from_entry_point(ep))
        return cls([*builtin_tools(), *loaded, *extra])


def _from_entry_point(ep: metadata.EntryPoint) -> list[Tool]:
    dist = getattr(ep, "dist", None)
    where = f"tool entry point {ep.name!r} = {ep.value!r} in group {ep.group!r}" + (
        f" (distribution {dist.name!r})" if dist is not None else ""
    )
    remove = (
        f'or remove it from that distribution\'s [project.entry-points."{ep.group}"] table '
        "and reinstall it."
    )
    try:
        obj = ep.load()
    except Exception as exc:
        raise ToolLoadError(
            f"{where} failed to import: {type(exc).__name__}: {exc}. Fix: install what it "
            f"needs or correct the 'module:attribute' reference, {remove}"
        ) from exc
    try:
        if inspect.isclass(obj):
            return [_check_tool(obj())]
        if isinstance(getattr(obj, "spec", None), ToolSpec) or not callable(obj):
            return [_check_tool(obj)]
        return [_check_tool(tool) for tool in obj()]
    except Exception as exc:
        raise ToolLoadError(
            f"{where} did not give Tools: {type(exc).__name__}: {exc}. Fix: point it at a Tool "
            "instance, a Tool class with a no-argument constructor, or a callable returning "
            f"Tools, {remove}"
        ) from exc
