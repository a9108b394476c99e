"""Agents talking to agents under per-service users (issue 23 item 2): a reply to
`replyTo`, `send_message` and `spawn` run end to end with the shipped ops/accounts.conf; with
the turn-runner's right to publish commands taken away, each refused message ends its
delivery with `MessageDropped{refused}` (and a runtime call fails), never a retry loop."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import events_of, only, running_services, wait_for
from tests.security.conftest import SecureServer, apply_as_operator, secure_server_in
from tests.security.test_identities import as_user, settings
from turnstream.bus import Bus
from turnstream.cli import secure
from turnstream.client import message_command, publish_command
from turnstream.core.events import (
    InputAccepted,
    MessageDropped,
    MessageSent,
    SessionTurnEnd,
    SubTurnSpawned,
    ToolInvocationFailed,
    TurnEnded,
)

pytestmark = pytest.mark.integration
SCRIPT = """
replies:
  - text: "echo: {input}"
agents:
  researcher:
    - text: "researched: {input}"
  sender:
    - tool_calls:
        - {name: send_message, arguments: {to: inbox-1, text: "hello inbox", expectReply: true}}
    - text: "sent: {last_tool_result}"
    - text: "got: {input}"
  spawner:
    - tool_calls: [{name: spawn, arguments: {task: "find the answer", agent: researcher}}]
    - text: "child said: {last_tool_result}"
"""


def _agents(tmp: Path) -> dict[str, object]:
    (tmp / "script.yaml").write_text(SCRIPT)
    agents = tmp / "agents"
    agents.mkdir()
    for name in ("researcher", "sender", "spawner"):
        profile = f"---\nname: {name}\ndescription: the {name}\n---\nYou are {name}.\n"
        (agents / f"{name}.md").write_text(profile)
    (tmp / "workspace").mkdir()
    return {"script": tmp / "script.yaml", "agents": agents}


async def _services_and_operator(server: SecureServer, tmp: Path) -> AsyncIterator[Bus]:
    extra = _agents(tmp)
    await apply_as_operator(server)
    async with running_services(lambda user: settings(server, user, tmp, **extra)):
        operator = await as_user(server, "operator")
        try:
            yield operator
        finally:
            await operator.close()


async def _send(server: SecureServer, command: dict[str, object]) -> None:
    """As the `client` user: commands in, nothing read."""
    client = await as_user(server, "client")
    try:
        await publish_command(client, str(command["sessionId"]), command)
    finally:
        await client.close()


@pytest.fixture(scope="module")
async def operator(
    secure_server: SecureServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Bus]:
    async for bus in _services_and_operator(secure_server, tmp_path_factory.mktemp("agents")):
        yield bus


async def test_a_reply_to_reply_to_is_delivered(secure_server: SecureServer, operator: Bus) -> None:
    await _send(secure_server, message_command("rb-1", "question", reply_to="ra-1"))
    asker = await wait_for(operator, "ra-1", lambda es: only(es, TurnEnded))
    assert only(asker, InputAccepted)[0].data.text == "echo: question"
    answered = await wait_for(operator, "rb-1", lambda es: only(es, SessionTurnEnd))
    assert [m.data.to for m in only(answered, MessageSent)] == ["ra-1"]


async def test_send_message_and_its_reply(secure_server: SecureServer, operator: Bus) -> None:
    await _send(secure_server, message_command("snd-1", "go", agent="sender"))
    inbox = await wait_for(operator, "inbox-1", lambda es: only(es, SessionTurnEnd))
    assert only(inbox, InputAccepted)[0].data.text == "hello inbox"
    back = await wait_for(operator, "snd-1", lambda es: len(only(es, TurnEnded)) == 2)
    assert only(back, TurnEnded)[1].data.reply == "got: echo: hello inbox"


async def test_spawn_runs_a_sub_turn(secure_server: SecureServer, operator: Bus) -> None:
    await _send(secure_server, message_command("par-1", "go", agent="spawner"))
    parent = await wait_for(operator, "par-1", lambda es: only(es, SessionTurnEnd))
    assert only(parent, TurnEnded)[0].data.reply == "child said: researched: find the answer"
    assert len(only(parent, SubTurnSpawned)) == 1


@pytest.fixture(scope="module")
def without_inbound_right(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureServer]:
    """The shipped accounts with the turn-runner's right to publish commands removed."""
    store = tmp_path_factory.mktemp("nats-no-inbound")
    shipped = secure.ACCOUNTS.read_text()
    assert shipped.count('"ts.in.*.agent", "ts.log.*.MessageSent"') == 1
    changed = store / "accounts.conf"
    changed.write_text(
        shipped.replace('"ts.in.*.agent", "ts.log.*.MessageSent"', '"ts.log.*.MessageSent"')
    )
    with secure_server_in(store, changed) as server:
        yield server


@pytest.fixture(scope="module")
async def refused_operator(
    without_inbound_right: SecureServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Bus]:
    tmp = tmp_path_factory.mktemp("refused")
    async for bus in _services_and_operator(without_inbound_right, tmp):
        yield bus


async def test_a_refused_reply_is_dropped_and_the_turn_closes(
    without_inbound_right: SecureServer, refused_operator: Bus
) -> None:
    await _send(without_inbound_right, message_command("rb-2", "question", reply_to="ra-2"))
    events = await wait_for(refused_operator, "rb-2", lambda es: only(es, SessionTurnEnd), 15)
    dropped = only(events, MessageDropped)
    assert len(dropped) == 1 and dropped[0].data.reason == "refused", dropped
    assert "turn-runner" in (dropped[0].data.detail or "")
    assert "ts.in.ra-2" in (dropped[0].data.detail or "")
    assert not only(events, MessageSent)
    assert await events_of(refused_operator, "ra-2") == []


async def test_a_refused_send_message_fails_the_call(
    without_inbound_right: SecureServer, refused_operator: Bus
) -> None:
    await _send(without_inbound_right, message_command("snd-2", "go", agent="sender"))
    events = await wait_for(refused_operator, "snd-2", lambda es: only(es, SessionTurnEnd), 15)
    failed = only(events, ToolInvocationFailed)
    assert [f.data.error.kind for f in failed] == ["refused"]
    assert only(events, TurnEnded)[0].data.reply.startswith("sent: ")
    assert [d.data.cause for d in only(events, MessageDropped)] == ["send_message"]
