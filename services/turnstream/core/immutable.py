"""Copies of frozen records with some fields changed: how every fold makes its new state."""

from __future__ import annotations

from typing import Any, TypeVar

S = TypeVar("S")


def with_changes(obj: S, **changes: Any) -> S:
    """A copy of a frozen dataclass with some fields changed.

    `dataclasses.replace` re-runs `__init__` over every field and a turn makes dozens of
    copies; copying the instance dict is several times cheaper (bench/pure_core.py).
    """
    new = _new(type(obj))
    _set_attr(new, "__dict__", obj.__dict__ | changes)
    return new


_new = object.__new__
_set_attr = object.__setattr__
