"""Decoding an event keeps none of its values alive: pydantic-core's process-wide string
cache, on by default, held the unique ids of the last 16,384 strings decoded, and those
made in a burst pinned the allocator's arenas the burst had grown (issue 42)."""

from __future__ import annotations

import sys

from tests.unit.factories import accepted
from turnstream.core.events import decode, encode


def test_a_decoded_events_ids_are_referenced_by_it_alone() -> None:
    wire = encode(accepted(1, session="a-session-seen-once"))
    event = decode(wire)
    event_id, session_id = event.id, event.session_id
    del event
    # a local name and getrefcount's argument: no cache holds them
    assert sys.getrefcount(event_id) == 2
    assert sys.getrefcount(session_id) == 2
