"""Pure parts of the HTTP face: `core.follow.Follow` (a command's verdict and its turn's end,
folded from events; the client follows with it too, by key) and address parsing."""

from __future__ import annotations

from tests.unit.factories import T0, accepted
from turnstream.core.events import (
    SteeringInjected,
    SteeringInjectedData,
    TurnEnded,
    TurnEndedData,
)
from turnstream.core.follow import Follow


def ended(turn_id: str, n: int = 1) -> TurnEnded:
    return TurnEnded(
        id=f"end-{turn_id}",
        time=T0,
        session_id="s1",
        chat_id="c1",
        turn_id=turn_id,
        trace_id="t",
        correlation_id=f"key{n}",
        source="turn-runner/1",
        data=TurnEndedData(status="completed", reply="ok"),
    )


def test_the_verdict_is_the_event_naming_the_inbound_sequence() -> None:
    follow = Follow(inbound_seq=2)
    follow.feed(10, accepted(1))  # another command's
    assert follow.decided is None
    follow.feed(11, accepted(2))
    assert follow.accepted is not None and follow.accepted.seq == 11
    assert follow.turn_id == "turn2"
    follow.feed(12, ended("turn1"))
    assert follow.ended is None
    follow.feed(13, ended("turn2", 2))
    assert follow.ended is not None and follow.ended.seq == 13


def test_a_steered_message_ends_with_the_turn_it_joined() -> None:
    follow = Follow(inbound_seq=2)
    follow.feed(5, accepted(2, kind="steer"))
    steer = SteeringInjected(
        id="st",
        time=T0,
        session_id="s1",
        chat_id="c1",
        turn_id="turn1",
        trace_id="t",
        correlation_id="key1",
        source="turn-runner/1",
        data=SteeringInjectedData(input_id="in2", text="hi"),
    )
    follow.feed(6, steer)
    assert follow.turn_id == "turn1"
    follow.feed(7, ended("turn1"))
    assert follow.ended is not None and follow.ended.event.turn_id == "turn1"


def test_followed_by_its_key_a_command_is_told_what_concerns_it() -> None:
    """The client knows a command by its idempotency key (a retry's verdict is the first
    command's, at another inbound seq): its verdict, its turn's events, and whatever carries
    its key concern it; another command's do not."""
    follow = Follow(None, key="key2")
    assert not follow.feed(0, accepted(1))  # another command's
    assert follow.feed(0, accepted(2)) and follow.turn_id == "turn2"
    assert not follow.feed(0, ended("turn1"))
    assert follow.ended is None
    assert follow.feed(0, ended("turn2", 2))
    assert follow.ended is not None and follow.ended.event.turn_id == "turn2"


def test_addresses_are_host_and_port() -> None:
    from turnstream.http.app import parse_addr

    assert parse_addr("127.0.0.1:8750") == ("127.0.0.1", 8750)
    assert parse_addr("[::1]:0") == ("::1", 0)
    assert parse_addr(":9000") == ("127.0.0.1", 9000)
