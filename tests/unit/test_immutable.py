"""`with_changes`: a copy with some fields changed, and a name the type does not have
refused (a misspelt field would otherwise ride along unseen, read by nothing)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from turnstream.core.immutable import with_changes


@dataclass(frozen=True)
class Point:
    x: int
    y: int = 0


def test_a_copy_with_a_field_changed_leaves_the_original() -> None:
    p = Point(1, 2)
    q = with_changes(p, y=5)
    assert (p, q) == (Point(1, 2), Point(1, 5))


def test_a_name_the_type_does_not_have_is_refused() -> None:
    with pytest.raises(TypeError, match="Point has no field z"):
        with_changes(Point(1), x=2, z=3)
