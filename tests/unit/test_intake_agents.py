"""The gateway's intake of agent messages: a named agent configures the session, an unknown
or a different one is a specific rejection, and a rejection keeps the sender's replyTo."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.unit.factories import T0
from turnstream.agents import AgentProfile
from turnstream.core.events import InputAccepted, InputRejected, SessionConfigured, TurnEnded
from turnstream.gateway.check import Inbound
from turnstream.gateway.intake import intake, settle_agent

MESSAGE = {
    "type": "message",
    "sessionId": "s1",
    "chatId": "c1",
    "sender": {"kind": "agent", "id": "a1"},
    "text": "hello",
    "idempotencyKey": "k1",
    "replyTo": "a1",
}
RESEARCHER = AgentProfile(
    name="researcher",
    description="reads",
    system_prompt="You read.",
    tools=("read_file",),
    security_mode="auto",
    max_iterations=4,
)


def load_agent(name: str) -> AgentProfile:
    if name != "researcher":
        raise FileNotFoundError(f"no agent {name!r} in ./agents (TURNSTREAM_AGENTS)")
    return RESEARCHER


def raw(body: dict[str, Any]) -> Inbound:
    return Inbound("s1", orjson.dumps(body), 7, T0, "TS_INBOUND")


def run(body: dict[str, Any]) -> list[Any]:
    return intake(raw(body), max_bytes=4096, now=T0, source="gw/1", load_agent=load_agent)


def test_a_named_agent_configures_the_session_with_its_profile() -> None:
    configured, accepted = run({**MESSAGE, "agent": "researcher", "hops": 2})
    assert isinstance(configured, SessionConfigured) and isinstance(accepted, InputAccepted)
    assert configured.data.tools == ["read_file"] and configured.data.max_iterations == 4
    assert configured.id != accepted.id  # two events, two ids (dedup keeps both)
    assert accepted.data.agent == "researcher" and accepted.data.hops == 2


def test_the_same_agent_again_adds_nothing_and_another_is_rejected() -> None:
    decided = run({**MESSAGE, "agent": "researcher"})
    again = settle_agent(raw(MESSAGE), decided, "researcher", now=T0, source="gw/1")
    assert [type(e) for e in again] == [InputAccepted]
    first = settle_agent(raw(MESSAGE), decided, None, now=T0, source="gw/1")
    assert first == decided
    other = settle_agent(raw(MESSAGE), decided, "coordinator", now=T0, source="gw/1")
    rejected, ended = other
    assert isinstance(rejected, InputRejected) and isinstance(ended, TurnEnded)
    assert rejected.data.kind == "agent_conflict" and "coordinator" in rejected.data.reason
    assert rejected.data.reply_to == "a1"  # the sender still hears back


@pytest.mark.parametrize(
    ("change", "kind"),
    [
        ({"agent": "nobody"}, "unknown_agent"),
        ({"agent": "../etc/passwd"}, "schema"),
        ({"hops": -1}, "schema"),
        ({"replyTo": "no spaces"}, "schema"),
        ({"inReplyTo": ""}, "schema"),
    ],
)
def test_bad_agent_fields_are_specific_rejections(change: dict[str, Any], kind: str) -> None:
    rejected, ended = run({**MESSAGE, **change})
    assert isinstance(rejected, InputRejected) and rejected.data.kind == kind
    assert ended.data.failure_class == "invalid_input"
    # a valid replyTo is kept, so the runner can deliver the rejection; an invalid one not
    expected = None if "replyTo" in change else "a1"
    assert rejected.data.reply_to == expected


def test_a_gateway_bug_on_one_command_rejects_it_instead_of_stalling_the_stream() -> None:
    def broken(name: str) -> AgentProfile:
        raise RuntimeError("profile cache corrupted")

    body = {**MESSAGE, "agent": "researcher"}
    events = intake(raw(body), max_bytes=1 << 20, now=T0, source="gateway/1", load_agent=broken)
    rejected, ended = events
    assert isinstance(rejected, InputRejected) and rejected.data.kind == "intake_failed"
    assert "RuntimeError: profile cache corrupted" in rejected.data.reason
    assert "inbound seq 7" in rejected.data.reason and rejected.data.inbound_seq == 7
    assert rejected.session_id == "s1" and rejected.data.reply_to is None
    assert isinstance(ended, TurnEnded) and ended.data.status == "failed"
