"""Copies of frozen records with some fields changed: how every fold makes its new state."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

S = TypeVar("S", bound="DataclassInstance")


def with_changes(obj: S, **changes: Any) -> S:
    """A copy of a frozen dataclass with some fields changed; a name that is not one of its
    fields is a `TypeError` (as `dataclasses.replace` says), never a stray attribute.

    `dataclasses.replace` re-runs `__init__` over every field and a turn makes dozens of
    copies; copying the instance dict is several times cheaper (bench/pure_core.py).
    """
    state = obj.__dict__
    changed = state | changes
    if len(changed) != len(state):  # a name it did not have: is it one of its fields?
        _refuse_unknown(type(obj), changes)
    new = _new(type(obj))
    _set_attr(new, "__dict__", changed)
    return new


def _refuse_unknown(cls: type[DataclassInstance], changes: dict[str, Any]) -> None:
    unknown = sorted(changes.keys() - cls.__dataclass_fields__.keys())
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {', '.join(unknown)}")


_new = object.__new__
_set_attr = object.__setattr__
