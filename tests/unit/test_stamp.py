"""`stamp` puts an event together without the validating constructor: what it makes must be
the constructor's model, byte for byte on the wire, for every event kind."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_contract import SAMPLE_DATA
from turnstream.core.events import EVENT_TYPES, Envelope, EventBase, decode, encode, stamp
from turnstream.core.events.base import _data_type, changed

texts = st.text(min_size=1, max_size=40)
times = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
) | st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(hours=-5, minutes=-30))]))


def validated(cls: type[EventBase], data: Any, envelope: Envelope, **given: Any) -> EventBase:
    """What the constructor makes of the same arguments (stamp's slow path, spelled out)."""
    return cls(
        id=given["event_id"],
        time=given["time"],
        session_id=envelope.session_id,
        chat_id=envelope.chat_id,
        turn_id=given.get("turn_id") or envelope.turn_id,
        trace_id=envelope.trace_id,
        correlation_id=envelope.correlation_id,
        causation_id=given["causation_id"],
        source=given["source"],
        data=data,
    )


def test_every_event_kind_takes_the_fast_path() -> None:
    assert [kind for kind, cls in EVENT_TYPES.items() if _data_type(cls) is False] == []


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(sorted(SAMPLE_DATA)),
    envelope=st.builds(Envelope, texts, texts, st.none() | texts, texts, texts),
    event_id=texts,
    time=times,
    source=texts,
    causation_id=st.none() | texts,
    turn_id=st.none() | texts,
)
def test_a_stamped_event_is_the_validated_one(
    kind: str,
    envelope: Envelope,
    event_id: str,
    time: datetime,
    source: str,
    causation_id: str | None,
    turn_id: str | None,
) -> None:
    cls = EVENT_TYPES[kind]
    data = cls.model_fields["data"].annotation.model_validate(SAMPLE_DATA[kind])  # type: ignore[union-attr]
    given = {"event_id": event_id, "time": time, "source": source, "causation_id": causation_id}
    made = stamp(cls, data, envelope, turn_id=turn_id, **given)
    expected = validated(cls, data, envelope, turn_id=turn_id, **given)
    assert type(made) is cls
    assert made == expected
    assert encode(made) == encode(expected)
    assert made.model_fields_set == expected.model_fields_set
    assert repr(made) == repr(expected)
    assert _hash(made) == _hash(expected)
    assert decode(encode(made)) == expected


def _hash(event: EventBase) -> int | str:
    try:
        return hash(event)
    except TypeError as exc:  # data with a list in it: unhashable either way
        return str(exc)


def test_other_data_goes_through_the_constructor() -> None:
    """A dict (or anything not the kind's data model) is validated as before: a wrong one
    is refused, a right one is converted."""
    cls = EVENT_TYPES["TurnEnded"]
    envelope = Envelope("s1", "c1", "t1", "tr", "k")
    given: dict[str, Any] = {
        "event_id": "e1",
        "time": datetime(2026, 1, 1, tzinfo=UTC),
        "source": "test",
        "causation_id": None,
    }
    made = stamp(cls, {"status": "completed", "iterations": 1}, envelope, **given)
    assert made.data == cls.model_fields["data"].annotation.model_validate(  # type: ignore[union-attr]
        {"status": "completed", "iterations": 1}
    )
    with pytest.raises(ValueError):
        stamp(cls, {"status": "maybe"}, envelope, **given)


def test_a_stamped_event_stays_frozen() -> None:
    cls = EVENT_TYPES["TurnEnded"]
    data = cls.model_fields["data"].annotation.model_validate(SAMPLE_DATA["TurnEnded"])  # type: ignore[union-attr]
    envelope = Envelope("s1", "c1", "t1", "tr", "k")
    made = stamp(
        cls, data, envelope, event_id="e1", time=datetime.now(UTC), source="x", causation_id=None
    )
    with pytest.raises(ValueError):
        made.id = "other"  # type: ignore[misc]
    copied = made.model_copy(update={"source": "y"})
    assert copied.source == "y" and made.source == "x"


@settings(max_examples=100, deadline=None)
@given(kind=st.sampled_from(sorted(SAMPLE_DATA)), causation_id=st.none() | texts, source=texts)
def test_changed_is_model_copy_field_for_field(
    kind: str, causation_id: str | None, source: str
) -> None:
    cls = EVENT_TYPES[kind]
    data = cls.model_fields["data"].annotation.model_validate(SAMPLE_DATA[kind])  # type: ignore[union-attr]
    envelope = Envelope("s1", "c1", "t1", "tr", "k")
    at = datetime(2026, 1, 1, tzinfo=UTC)
    event = stamp(cls, data, envelope, event_id="e1", time=at, source="x", causation_id="c")
    update: dict[str, Any] = {"causation_id": causation_id, "source": source}
    made, expected = changed(event, **update), event.model_copy(update=update)
    assert type(made) is cls and made == expected and made.__dict__ == expected.__dict__
    assert made.model_fields_set == expected.model_fields_set
    assert made.__pydantic_extra__ is expected.__pydantic_extra__ is None
    assert made.__pydantic_private__ is expected.__pydantic_private__ is None
    assert encode(made) == encode(expected) and repr(made) == repr(expected)
    assert event.causation_id == "c" and event.source == "x"  # the original is untouched
