"""Plug-ins declared as entry points: each names a `(spec, callable)` pair, a list of them,
or a function returning either (hooks, context providers)."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any


def load_pairs(group: str, what: str) -> list[tuple[Any, Any]]:
    """Every pair the entry points of `group` declare; a broken one raises naming the fix."""
    found: list[tuple[Any, Any]] = []
    for ep in entry_points(group=group):
        try:
            value = ep.load()
            items = value() if callable(value) and not isinstance(value, tuple) else value
            found.extend([items] if isinstance(items, tuple) else list(items))
        except Exception as exc:
            raise RuntimeError(
                f"{what} entry point {ep.name!r} ({ep.value}) failed to load: {exc}; fix or "
                f"uninstall the package that declares it in [{group}]"
            ) from exc
    return found
