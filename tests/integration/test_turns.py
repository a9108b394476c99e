"""gateway + turn-runner over a real nats-server: turns end to end."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from tests.integration.conftest import events_of, running_services, settings_for
from tests.integration.partitioned import log_partitions_1_and_4  # noqa: F401 (fixture)
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.client import message_command, publish_command, send_and_wait
from turnstream.core.events import (
    FollowUpQueued,
    InputAccepted,
    InputRejected,
    SessionTurnEnd,
    SessionTurnStart,
    TurnEnded,
)
from turnstream.core.session import SessionState, fold, state_from_json
from turnstream.core.subjects import REJECTED_SESSION, session_key

SCRIPT = """
replies:
  - text: "echo: {input}"
  - text: "slow: {input}"
    delay_ms: 150
  - error: {error_class: overloaded, message: "provider busy", retryable: true, status_code: 529}
"""


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("script") / "script.yaml"
    path.write_text(SCRIPT)
    return path


@pytest.fixture(scope="module")
async def services(nats_server: EmbeddedServer, bus: Bus, script: Path, tmp_path_factory):
    settings = settings_for(
        nats_server, tmp_path_factory.mktemp("data"), script=script, max_input_bytes=4096
    )
    async with running_services(settings, bus):
        yield settings


async def test_one_message_gives_exactly_one_completed_turn(bus: Bus, services) -> None:
    outcome = await send_and_wait(bus, message_command("one", "hello there"), timeout=10)
    assert outcome.status == "completed"
    assert outcome.reply == "echo: hello there"
    events = await events_of(bus, "one")
    assert sum(isinstance(e, TurnEnded) for e in events) == 1
    assert isinstance(events[-1], SessionTurnEnd)


async def test_a_duplicate_publish_gives_one_turn(bus: Bus, services) -> None:
    command = message_command("dup", "only once", idempotency_key="dup-key-1")
    outcome = await send_and_wait(bus, command, timeout=10)
    await publish_command(bus, "dup", command)
    await publish_command(bus, "dup", command)
    await asyncio.sleep(0.5)
    events = await events_of(bus, "dup")
    assert outcome.completed
    assert sum(isinstance(e, InputAccepted) for e in events) == 1
    assert sum(isinstance(e, TurnEnded) for e in events) == 1


async def test_three_messages_at_once_run_as_three_ordered_turns(bus: Bus, services) -> None:
    # replies 0, 1 (slow, 150 ms), 2 (fails) of the script: the 2nd and 3rd wait in line
    commands = [message_command("three", f"m{i}") for i in range(3)]
    outcomes = await asyncio.gather(*(send_and_wait(bus, c, timeout=15) for c in commands))
    events = await events_of(bus, "three")
    starts = [e for e in events if isinstance(e, SessionTurnStart)]
    ends = [e for e in events if isinstance(e, TurnEnded)]
    accepted = [e for e in events if isinstance(e, InputAccepted)]
    assert [e.data.text for e in starts] == [e.data.text for e in accepted]
    assert [e.turn_id for e in ends] == [e.turn_id for e in starts]
    # never overlapping: each turn ends before the next starts
    timeline = [
        (e.turn_id, type(e).__name__) for e in events if isinstance(e, SessionTurnStart | TurnEnded)
    ]
    assert [kind for _, kind in timeline] == ["SessionTurnStart", "TurnEnded"] * 3
    assert any(isinstance(e, FollowUpQueued) for e in events)
    assert sorted(o.status for o in outcomes) == ["completed", "completed", "failed"]
    failed = next(o for o in outcomes if o.status == "failed")
    assert failed.failure_class == "provider_error" and failed.next_action


async def test_fifty_sessions_at_once_all_complete(bus: Bus, services) -> None:
    commands = [message_command(f"many-{i}", f"hi {i}") for i in range(50)]
    outcomes = await asyncio.gather(*(send_and_wait(bus, c, timeout=30) for c in commands))
    assert [o.status for o in outcomes] == ["completed"] * 50
    assert [o.reply for o in outcomes] == [f"echo: hi {i}" for i in range(50)]


GOOD = message_command("bad", "fine")


@pytest.mark.parametrize(
    ("payload", "session", "kind"),
    [
        (b"this is not json", "bad", "not_json"),
        (orjson.dumps({k: v for k, v in GOOD.items() if k != "text"}), "bad", "schema"),
        (orjson.dumps({**GOOD, "sessionId": "bad.id"}), "bad.id", "bad_session_id"),
        (orjson.dumps({**GOOD, "text": "x" * 5000}), "bad", "oversize"),
        (orjson.dumps({**GOOD, "type": "shout"}), "bad", "unknown_type"),
    ],
)
async def test_invalid_input_is_rejected_specifically_and_the_service_keeps_running(
    bus: Bus, services, payload: bytes, session: str, kind: str
) -> None:
    logged = REJECTED_SESSION if kind == "bad_session_id" else session
    key = f"bad-{kind}"
    seen: asyncio.Queue = asyncio.Queue()
    sub = await bus.nc.subscribe(bus.subjects.log_live(logged, "TurnEnded"), cb=seen.put)
    try:
        await bus.js.publish(bus.subjects.inbound(session), payload, headers={"Nats-Msg-Id": key})
        # the terminal event comes after the rejection: once it is out, both are stored
        msg = await asyncio.wait_for(seen.get(), 10)
    finally:
        await sub.unsubscribe()
    turn_id = TurnEnded.model_validate_json(msg.data).turn_id
    [rejected] = [
        e
        for e in await events_of(bus, logged)
        if isinstance(e, InputRejected) and e.turn_id == turn_id
    ]
    assert rejected.data.kind == kind
    ended = [
        e
        for e in await events_of(bus, logged)
        if isinstance(e, TurnEnded) and e.turn_id == rejected.turn_id
    ]
    assert len(ended) == 1 and ended[0].data.failure_class == "invalid_input"
    # the gateway is still serving
    outcome = await send_and_wait(bus, message_command(f"after-{kind}", "still there?"), timeout=10)
    assert outcome.completed


async def test_replay_gives_the_same_state_as_the_live_runner(bus: Bus, services) -> None:
    for text in ("a", "b", "c"):
        await send_and_wait(bus, message_command("replayed", text), timeout=15)
    subject = bus.subjects.api("turn-runner", "session")
    # the reply is observable a moment before the runner has its own acks back
    for _ in range(50):
        rebuilt = fold(SessionState.of("replayed"), await events_of(bus, "replayed"))
        reply = await bus.nc.request(subject, orjson.dumps({"sessionId": "replayed"}), timeout=5)
        live = state_from_json(reply.data)
        if live == rebuilt:
            break
        await asyncio.sleep(0.02)
    assert live == rebuilt
    assert rebuilt.chat.turns_ended == 3 and rebuilt.chat.active is None
    assert [m.text for m in rebuilt.chat.history if m.role == "user"] == ["a", "b", "c"]


async def test_tokens_stream_on_the_live_subject(bus: Bus, services) -> None:
    deltas: list[str] = []
    outcome = await send_and_wait(
        bus, message_command("live", "stream me"), on_delta=deltas.append, timeout=10
    )
    assert "".join(deltas) == outcome.reply
    assert len(deltas) > 1


async def test_a_steered_message_hears_back_with_the_turn_it_joined(bus: Bus, services) -> None:
    # reply 0 is quick; the session's 2nd call (reply 1) is slow: steer into that turn
    await send_and_wait(bus, message_command("steered", "warm up"), timeout=10)
    first = asyncio.create_task(
        send_and_wait(bus, message_command("steered", "slow one"), timeout=15)
    )
    await asyncio.sleep(0.05)
    steer = message_command("steered", "and be brief", kind="steer")
    joined = await send_and_wait(bus, steer, timeout=15)
    main = await first
    assert joined.turn_id == main.turn_id and joined.status == main.status
    events = await events_of(bus, "steered")
    assert any(e.type == "SteeringInjected" for e in events)


async def test_a_reload_reads_the_snapshot_and_only_the_tail(bus: Bus, services) -> None:
    from turnstream.core.turn import TurnConfig
    from turnstream.providers import ScriptedProvider, load_script
    from turnstream.turn_runner.app import Runner
    from turnstream.turn_runner.session import SessionActor

    for i in range(17):  # 13 events a turn: past the snapshot threshold of 200
        await send_and_wait(bus, message_command("agent:snapshotted", f"turn {i}"), timeout=15)
    everything = await events_of(bus, "agent:snapshotted")
    runner = Runner(bus, ScriptedProvider(load_script(None)), TurnConfig())
    first = SessionActor(runner.actor_context(), "agent:snapshotted")
    await first.reload()
    assert runner.reloaded_events == len(everything) > 200
    assert first.state == fold(SessionState.of("agent:snapshotted"), everything)
    kv = await bus.js.key_value(bus.subjects.snapshots_bucket)
    assert (await kv.get(session_key("agent:snapshotted"))).value
    await send_and_wait(bus, message_command("agent:snapshotted", "one more"), timeout=15)
    second = SessionActor(runner.actor_context(), "agent:snapshotted")
    await second.reload()
    tail = runner.reloaded_events - len(everything)
    assert 0 < tail < 30  # the snapshot, then one turn's events
    assert second.state == fold(
        SessionState.of("agent:snapshotted"), await events_of(bus, "agent:snapshotted")
    )
    # a snapshot of a state of another shape (before `snapshots.FORMAT`) is not read
    key = session_key("agent:snapshotted")
    body = orjson.loads((await kv.get(key)).value)
    del body["format"]
    await kv.put(key, orjson.dumps(body))
    third = SessionActor(runner.actor_context(), "agent:snapshotted")
    before = runner.reloaded_events
    await third.reload()
    now = await events_of(bus, "agent:snapshotted")
    assert runner.reloaded_events - before == len(now)  # the whole log
    assert third.state == fold(SessionState.of("agent:snapshotted"), now)
