"""Copies of frozen records with some fields changed: how every fold makes its new state."""

from __future__ import annotations

from typing import Any, TypeVar

S = TypeVar("S")


def with_changes(obj: S, **changes: Any) -> S:
    """A copy of a frozen dataclass with some fields changed.

    `dataclasses.replace` re-runs `__init__` over every field and a turn makes dozens of
    copies; copying the instance dict is several times cheaper (bench/pure_core.py).
    """
    new = object.__new__(type(obj))
    fields = dict(obj.__dict__)
    fields.update(changes)
    object.__setattr__(new, "__dict__", fields)
    return new
