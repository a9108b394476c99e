"""Agents over a real nats-server (DESIGN §11): profiles applied to sessions, replies
between sessions, `send_message`, sub-turns (sync and async)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.integration.conftest import (
    events_of,
    only,
    running_services,
    settings_for,
    wait_for,
)
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.client import message_command, publish_command, send_and_wait
from turnstream.core.events import (
    Event,
    InputAccepted,
    InputRejected,
    MessageDropped,
    MessageSent,
    ProviderRequestStarted,
    SessionConfigured,
    SessionTurnEnd,
    SubTurnEnded,
    SubTurnResultDelivered,
    SubTurnSpawned,
    ToolCallDenied,
    ToolInvocationFailed,
    TurnEnded,
)

SCRIPT = """
replies:
  - text: "echo: {input}"
agents:
  researcher:
    - text: "researched: {input}"
  looper:
    - tool_calls: [{name: read_file, arguments: {path: notes.txt}}]
  forbidden:
    - tool_calls: [{name: write_file, arguments: {path: x.txt, content: "x"}}]
    - text: "after: {last_tool_result:60}"
  failing:
    - error: {error_class: server_error, message: "model down", retryable: false}
  sender:
    - tool_calls:
        - {name: send_message, arguments: {to: inbox-1, text: "hello inbox", expectReply: true}}
    - text: "sent: {last_tool_result}"
    - text: "got: {input}"
  badsender:
    - tool_calls: [{name: send_message, arguments: {to: "not a session!", text: "x"}}]
    - text: "after: {last_tool_result}"
  spawner:
    - tool_calls: [{name: spawn, arguments: {task: "find the answer", agent: researcher}}]
    - text: "child said: {last_tool_result}"
  asyncer:
    - tool_calls: [{name: spawn, arguments: {task: "later", agent: researcher, mode: async}}]
    - text: "spawned: {last_tool_result}"
    - text: "follow-up: {input}"
  badspawn:
    - tool_calls: [{name: spawn, arguments: {agent: researcher}}]
    - text: "after: {last_tool_result}"
  slowparent:
    - tool_calls: [{name: spawn, arguments: {task: "take long", agent: slowchild}}]
    - text: "never: {last_tool_result}"
  slowchild:
    - text: "slow answer"
      delay_ms: 3000
  denier:
    - tool_calls: [{name: read_file, arguments: {path: notes.txt}}]
    - text: "after: {last_tool_result:60}"
  nester:
    - tool_calls: [{name: spawn, arguments: {task: "go deeper"}}]
    - text: "depth done: {last_tool_result:200}"
""" + "".join(
    # each ring agent's first turn only says so; then every turn passes the message on
    f"  ring-{a}:\n"
    '    - text: "ready"\n'
    + (
        f"    - tool_calls: [{{name: send_message, arguments: {{to: cyc-{b}, text: pass}}}}]\n"
        '    - text: "passed"\n'
    )
    * 6
    for a, b in (("a", "b"), ("b", "c"), ("c", "a"))
)

PROFILES = {
    "researcher": "tools: [read_file]\nmaxIterations: 3",
    "looper": "tools: [read_file]\nmaxIterations: 2",
    "forbidden": "tools: [read_file]",
    "failing": "",
    "sender": "",
    "badsender": "",
    "spawner": "",
    "asyncer": "",
    "badspawn": "",
    "nester": "",
    "ring-a": "",
    "ring-b": "",
    "ring-c": "",
    "denier": "securityMode: deny\nmodel: tiny-model",
    "slowparent": "",
    "slowchild": "",
}


@pytest.fixture(scope="module")
async def services(nats_server: EmbeddedServer, bus: Bus, tmp_path_factory: Any):
    tmp = tmp_path_factory.mktemp("agents")
    script = tmp / "script.yaml"
    script.write_text(SCRIPT)
    agents = tmp / "agents"
    agents.mkdir()
    for name, extra in PROFILES.items():
        body = f"---\nname: {name}\ndescription: the {name} agent\n{extra}\n---\nYou are {name}.\n"
        (agents / f"{name}.md").write_text(body)
    (tmp / "workspace").mkdir()
    (tmp / "workspace" / "notes.txt").write_text("some notes")
    settings = settings_for(nats_server, tmp, script=script, agents=agents, max_subturn_depth=2)
    async with running_services(settings, bus):
        yield settings


async def test_a_message_naming_an_agent_configures_its_session(bus: Bus, services) -> None:
    outcome = await send_and_wait(bus, message_command("ag-1", "hi", agent="researcher"))
    assert outcome.reply == "researched: hi"
    again = await send_and_wait(bus, message_command("ag-1", "more"))  # no agent: the session's
    assert again.reply == "researched: more"
    same = await send_and_wait(bus, message_command("ag-1", "same", agent="researcher"))
    assert same.completed
    events = await events_of(bus, "ag-1")
    configured = only(events, SessionConfigured)
    assert len(configured) == 1
    assert configured[0].data.tools == ["read_file"]
    assert configured[0].data.system_prompt == "You are researcher."


async def test_unknown_agent_and_another_agent_are_rejected(bus: Bus, services) -> None:
    outcome = await send_and_wait(bus, message_command("ag-2", "hi", agent="nobody"))
    assert outcome.status == "failed" and outcome.failure_class == "invalid_input"
    assert "no agent 'nobody'" in (outcome.reason or "")
    await send_and_wait(bus, message_command("ag-2", "hi", agent="researcher"))
    switched = await send_and_wait(bus, message_command("ag-2", "hi", agent="sender"))
    assert switched.status == "failed" and "researcher" in (switched.reason or "")
    events = await events_of(bus, "ag-2")
    kinds = [e.data.kind for e in only(events, InputRejected)]
    assert kinds == ["unknown_agent", "agent_conflict"]
    assert len(only(events, SessionConfigured)) == 1


async def test_profile_tools_and_max_iterations_apply(bus: Bus, services) -> None:
    looped = await send_and_wait(bus, message_command("ag-3", "go", agent="looper"))
    assert looped.status == "failed" and looped.failure_class == "limit_exceeded"
    assert "maxIterations=2" in (looped.reason or "")
    forbidden = await send_and_wait(bus, message_command("ag-4", "go", agent="forbidden"))
    assert forbidden.completed
    events = await events_of(bus, "ag-4")
    failed = only(events, ToolInvocationFailed)
    assert [f.data.error.kind for f in failed] == ["unknown_tool"]  # not in its allowlist
    started = only(events, ProviderRequestStarted)
    assert started[0].data.model == "demo"


async def test_reply_to_is_delivered_once_with_its_chain(bus: Bus, services) -> None:
    command = message_command("rb-1", "question", reply_to="ra-1", idempotency_key="q-1")
    outcome = await send_and_wait(bus, command)
    assert outcome.completed
    a = await wait_for(bus, "ra-1", lambda es: only(es, TurnEnded))
    accepted = only(a, InputAccepted)[0]
    assert accepted.data.sender.kind == "agent" and accepted.data.sender.id == "rb-1"
    assert accepted.data.in_reply_to == "q-1" and accepted.data.hops == 1
    assert accepted.data.reply_to is None  # a reply asks for no reply
    assert accepted.data.text == "echo: question"
    b = await wait_for(bus, "rb-1", lambda es: only(es, SessionTurnEnd))
    sent = only(b, MessageSent)
    assert len(sent) == 1
    assert sent[0].data.to == "ra-1" and sent[0].data.cause == "replyTo"
    assert sent[0].data.idempotency_key == f"reply:{outcome.turn_id}"
    # MessageSent comes before the turn closes
    assert b.index(sent[0]) < b.index(only(b, SessionTurnEnd)[0])


async def test_a_failed_turn_replies_with_its_failure(bus: Bus, services) -> None:
    command = message_command("rb-2", "q", reply_to="ra-2", agent="failing")
    outcome = await send_and_wait(bus, command)
    assert outcome.status == "failed"
    a = await wait_for(bus, "ra-2", lambda es: only(es, InputAccepted))
    text = only(a, InputAccepted)[0].data.text
    assert text.startswith("turn failed (provider_error)")
    assert only(a, InputAccepted)[0].data.outcome.status == "failed"


async def test_a_rejected_message_replies_with_its_rejection(bus: Bus, services) -> None:
    command = message_command("rb-5", "q", reply_to="ra-5", agent="nobody")
    outcome = await send_and_wait(bus, command)
    assert outcome.failure_class == "invalid_input"
    a = await wait_for(bus, "ra-5", lambda es: only(es, InputAccepted))
    reply = only(a, InputAccepted)[0].data
    assert reply.text.startswith("turn failed (invalid_input): no agent 'nobody'")
    assert reply.in_reply_to == command["idempotencyKey"] and reply.hops == 1
    b = await wait_for(bus, "rb-5", lambda es: only(es, MessageSent))
    assert len(only(b, MessageSent)) == 1


async def test_past_the_hop_limit_a_reply_is_dropped(bus: Bus, services) -> None:
    command = {**message_command("rb-3", "q", reply_to="ra-3"), "hops": 8}
    await send_and_wait(bus, command)
    b = await wait_for(bus, "rb-3", lambda es: only(es, SessionTurnEnd))
    dropped = only(b, MessageDropped)
    assert len(dropped) == 1 and dropped[0].data.reason == "hop_limit"
    assert dropped[0].data.hops == 9 and not only(b, MessageSent)
    assert await events_of(bus, "ra-3") == []


async def test_negative_hops_and_a_bad_reply_to_are_rejected(bus: Bus, services) -> None:
    negative = {**message_command("rb-4", "q"), "hops": -1}
    outcome = await send_and_wait(bus, negative)
    assert outcome.failure_class == "invalid_input" and "hops" in (outcome.reason or "")
    bad = message_command("rb-4", "q", reply_to="no spaces allowed")
    outcome = await send_and_wait(bus, bad)
    assert outcome.failure_class == "invalid_input"


async def test_send_message_with_expect_reply(bus: Bus, services) -> None:
    outcome = await send_and_wait(bus, message_command("snd-1", "go", agent="sender"))
    assert outcome.completed and outcome.reply.startswith("sent: sent to inbox-1")
    inbox = await wait_for(bus, "inbox-1", lambda es: only(es, SessionTurnEnd))
    got = only(inbox, InputAccepted)[0].data
    assert got.text == "hello inbox" and got.reply_to == "snd-1" and got.hops == 1
    # the inbox's reply comes back as a new turn of the sender
    back = await wait_for(bus, "snd-1", lambda es: len(only(es, TurnEnded)) == 2)
    assert only(back, TurnEnded)[1].data.reply == "got: echo: hello inbox"
    sent = only(back, MessageSent)
    assert [s.data.cause for s in sent] == ["send_message"]


async def test_send_message_to_an_invalid_session_fails_the_call(bus: Bus, services) -> None:
    outcome = await send_and_wait(bus, message_command("snd-2", "go", agent="badsender"))
    assert outcome.completed
    failed = only(await events_of(bus, "snd-2"), ToolInvocationFailed)
    assert failed[0].data.error.kind == "invalid_arguments"
    assert "session id" in failed[0].data.error.detail


async def test_a_sync_sub_turn_answers_its_spawn_call(bus: Bus, services) -> None:
    outcome = await send_and_wait(bus, message_command("par-1", "go", agent="spawner"))
    assert outcome.reply == "child said: researched: find the answer"
    events = await wait_for(bus, "par-1", lambda es: only(es, SessionTurnEnd))
    spawned, ended = only(events, SubTurnSpawned), only(events, SubTurnEnded)
    delivered = only(events, SubTurnResultDelivered)
    assert len(spawned) == len(ended) == len(delivered) == 1
    assert delivered[0].data.delivered_as == "tool_result"
    child = spawned[0].data.child_session_id
    child_events = await events_of(bus, child)
    accepted = only(child_events, InputAccepted)[0]
    assert accepted.data.parent is not None and accepted.data.parent.depth == 1
    assert accepted.data.sender.id == "par-1"
    assert only(child_events, SessionConfigured)[0].data.agent == "researcher"
    assert len(only(events, TurnEnded)) == 1  # the reply started no turn of its own


async def test_an_async_sub_turn_comes_back_once(bus: Bus, services) -> None:
    outcome = await send_and_wait(bus, message_command("par-2", "go", agent="asyncer"))
    assert outcome.reply.startswith('spawned: {"childSessionId":')
    events = await wait_for(bus, "par-2", lambda es: only(es, SubTurnResultDelivered))
    delivered = only(events, SubTurnResultDelivered)
    assert len(delivered) == 1 and delivered[0].data.delivered_as in ("steering", "follow_up")
    if delivered[0].data.delivered_as == "follow_up":
        events = await wait_for(bus, "par-2", lambda es: len(only(es, TurnEnded)) == 2)
        assert "researched: later" in (only(events, TurnEnded)[1].data.reply or "")


async def test_spawn_without_task_and_past_the_depth_limit(bus: Bus, services) -> None:
    outcome = await send_and_wait(bus, message_command("par-3", "go", agent="badspawn"))
    assert outcome.completed
    failed = only(await events_of(bus, "par-3"), ToolInvocationFailed)
    error = failed[0].data.error
    assert error.kind == "invalid_arguments" and "task" in error.detail
    # nester spawns itself: depth 1 and 2 run, depth 3 is past TURNSTREAM_MAX_SUBTURN_DEPTH=2
    outcome = await send_and_wait(bus, message_command("par-4", "go", agent="nester"), timeout=20)
    assert outcome.completed
    assert "limit_exceeded" in (outcome.reply or "")


async def test_a_hard_interrupt_reaches_a_running_child(bus: Bus, services) -> None:
    await publish_command(bus, "par-5", message_command("par-5", "go", agent="slowparent"))
    parent = await wait_for(bus, "par-5", lambda es: only(es, SubTurnSpawned))
    child = only(parent, SubTurnSpawned)[0].data.child_session_id
    await wait_for(bus, child, lambda es: only(es, ProviderRequestStarted))
    stop = {**message_command("par-5", "x"), "type": "interrupt", "mode": "hard"}
    del stop["text"]
    await publish_command(bus, "par-5", stop)
    child_log = await wait_for(bus, child, lambda es: only(es, TurnEnded))
    assert only(child_log, TurnEnded)[0].data.failure_class == "interrupted"
    parent = await wait_for(bus, "par-5", lambda es: only(es, SubTurnResultDelivered))
    assert only(parent, TurnEnded)[0].data.failure_class == "interrupted"
    assert [s.data.kind for s in only(parent, MessageSent)] == ["message", "interrupt"]
    [ended] = only(parent, SubTurnEnded)
    assert ended.data.status == "failed" and ended.data.failure_class == "interrupted"
    assert only(parent, SubTurnResultDelivered)[0].data.delivered_as == "dropped"
    assert len(only(parent, TurnEnded)) == 1


async def test_a_profile_security_mode_and_model_apply(bus: Bus, services) -> None:
    outcome = await send_and_wait(bus, message_command("ag-5", "go", agent="denier"))
    assert outcome.completed and "policy_denied" in (outcome.reply or "")
    events = await events_of(bus, "ag-5")
    assert only(events, ToolCallDenied)[0].data.reason == "the session's security mode is deny"
    assert only(events, ProviderRequestStarted)[0].data.model == "tiny-model"


async def test_a_three_agent_cycle_stops_at_the_hop_limit(bus: Bus, services) -> None:
    # A→B→C→A…: hops count every delivery, so the chain stops after TURNSTREAM_MAX_HOPS (8).
    # Each session's agent is fixed before the chain starts (a message reaching a session
    # with no agent yet would run under the default one and shift its script)
    for name in "abc":
        await send_and_wait(bus, message_command(f"cyc-{name}", "start", agent=f"ring-{name}"))
    await send_and_wait(bus, message_command("cyc-a", "go"))

    async def chain_done() -> list[Event]:
        while True:
            logs = [e for n in "abc" for e in await events_of(bus, f"cyc-{n}")]
            if only(logs, MessageDropped):
                return logs
            await asyncio.sleep(0.1)

    logs = await asyncio.wait_for(chain_done(), 30)
    await asyncio.sleep(1.0)  # nothing goes on after the drop
    logs = [e for n in "abc" for e in await events_of(bus, f"cyc-{n}")]
    sent, dropped = only(logs, MessageSent), only(logs, MessageDropped)
    assert [d.data.hops for d in dropped] == [9]
    assert sorted(s.data.hops for s in sent) == list(range(1, 9))
    assert all(f.data.error.kind == "hop_limit" for f in only(logs, ToolInvocationFailed))
