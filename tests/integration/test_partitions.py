"""The log in four partition streams (TURNSTREAM_LOG_PARTITIONS=4), on a real nats-server
with the account's subject mapping: turns with a tool and a prompt through every service,
each session's events in its own partition only, `turnstream replay --verify` of each, and
the event store's contract across partitions. (test_turns, test_archive and
tests/http/test_sse run at 1 and 4 partitions too.)"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from tests.integration import test_tools_path
from tests.integration.conftest import events_of, only, running_services, settings_for
from tests.integration.test_event_store import ev
from tests.integration.test_tools_path import ROUND_TRIP, answer_prompts, registry, script
from tests.unit.factories import T0
from turnstream.bus import AppendConflict, Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.scan import log_last_seq, open_sessions, scan_log, subject_counts
from turnstream.client import message_command, send_and_wait
from turnstream.core.events import (
    InteractionRequested,
    ToolCallApproved,
    ToolInvocationSucceeded,
    TurnEnded,
)

N = 4


@pytest.fixture(scope="module")
def log_partitions() -> int:
    return N


def one_session_per_partition(bus: Bus, prefix: str) -> list[str]:
    """Session ids whose partitions are 0, 1, 2 and 3."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < N:
        session = f"{prefix}-{i}"
        found.setdefault(bus.subjects.partition_of(session), session)
        i += 1
    return [found[k] for k in range(N)]


async def in_streams(bus: Bus, session: str) -> dict[str, int]:
    """How many of `session`'s events each log stream holds (those with any)."""
    out = {}
    for stream in bus.subjects.log_streams:
        counts = await subject_counts(bus.nc, stream, bus.subjects.log_session(session))
        if counts:
            out[stream] = sum(counts.values())
    return out


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "notes.txt").write_text("the secret word is turnip\n")
    return tmp_path


async def test_turns_with_a_tool_and_a_prompt_run_in_every_partition(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path
) -> None:
    sessions = one_session_per_partition(bus, "part-ask")
    settings = settings_for(nats_server, tmp, script=script(tmp, *ROUND_TRIP), security_mode="ask")
    assert settings.log_partitions == N
    seen: list[InteractionRequested] = []
    async with running_services(settings, bus, tools=registry()):
        for session in sessions:
            await answer_prompts(bus, session, "approve", seen)
        outcomes = await asyncio.gather(
            *(send_and_wait(bus, message_command(s, "read my notes"), timeout=30) for s in sessions)
        )
    assert [o.status for o in outcomes] == ["completed"] * N, outcomes
    assert all("turnip" in (o.reply or "") for o in outcomes)
    assert sorted(p.session_id for p in seen) == sorted(sessions)  # asked once each
    for k, session in enumerate(sessions):
        events = await events_of(bus, session)
        assert len(only(events, TurnEnded)) == 1
        assert len(only(events, ToolCallApproved)) == 1
        assert len(only(events, ToolInvocationSucceeded)) == 1
        assert await in_streams(bus, session) == {f"TS_LOG_{k}": len(events)}

    env = {
        **os.environ,
        "TURNSTREAM_NATS_URL": nats_server.url,
        "TURNSTREAM_LOG_PARTITIONS": str(N),
        "TURNSTREAM_DATA_DIR": str(tmp),
    }
    # the runner answers the live state: replay --verify while it runs
    async with running_services(settings, bus, tools=registry()):
        for session in sessions:
            verified = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "turnstream.cli", "replay", session, "--verify"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert verified.returncode == 0, verified.stdout + verified.stderr
            assert "rebuilt state equals the live state" in verified.stdout


async def test_the_store_fences_and_reads_each_session_in_its_partition(bus: Bus) -> None:
    a, b = one_session_per_partition(bus, "part-store")[:2]
    store = bus.store
    first = await store.append_decision(a, [ev(a), ev(a)], expected_last_seq=0)
    await store.append_decision(b, [ev(b)], expected_last_seq=0)
    assert await store.last_seq(a) == first
    with pytest.raises(AppendConflict):  # the fence compares the session's own partition
        await store.append_decision(a, [ev(a)], expected_last_seq=first - 1)
    assert [s.seq for s in await store.read_session(a)] == [first - 1, first]
    assert await log_last_seq(
        bus.js, bus.subjects, bus.subjects.log_session(b), stream=bus.subjects.log_stream_of(b)
    ) == await store.last_seq(b)

    everything = await store.read_all()
    assert {s.event.session_id for s in everything} >= {a, b}
    kinds = await store.read_kind("SessionTurnEnd", since=T0 - timedelta(days=1))
    assert {s.event.session_id for s in kinds} >= {a, b}
    with pytest.raises(ValueError, match="partition"):
        await store.read_all(after_seq=1)
    with pytest.raises(ValueError, match="log_stream_of"):
        await scan_log(bus.js, bus.subjects, lambda *_: None)
    seen: list[str] = []
    await scan_log(
        bus.js,
        bus.subjects,
        lambda _seq, subject, _data: seen.append(bus.subjects.session_from_log(subject)),
        stream=bus.subjects.log_stream_of(a),
    )
    assert a in seen and b not in seen


async def test_open_sessions_are_found_in_every_partition_or_in_one(bus: Bus) -> None:
    from tests.unit.audit_events import start

    sessions = one_session_per_partition(bus, "part-open")
    for session in sessions:
        await bus.store.append(session, [start(session, "t1")])
    assert set(sessions) <= await open_sessions(bus.nc, bus.subjects)
    only_two = await open_sessions(bus.nc, bus.subjects, bus.subjects.log_stream_at(2))
    assert sessions[2] in only_two and not {sessions[0], sessions[1], sessions[3]} & only_two


async def test_a_hard_abort_reaches_the_executor_through_the_live_partition_subject(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path
) -> None:
    """The executor hears a turn's `TurnEnded` on `ts.log.*.TurnEnded.*` (`log_kind_live`)."""
    await test_tools_path.test_a_hard_abort_cancels_the_turns_running_invocations(
        nats_server, bus, tmp
    )


async def test_a_claim_left_running_finds_the_result_in_the_sessions_partition(
    nats_server: EmbeddedServer, bus: Bus, tmp: Path
) -> None:
    """The executor's look for a result already appended reads the session's own stream."""
    await test_tools_path.test_a_claim_left_running_after_the_result_was_appended(
        nats_server, bus, tmp, "slow_write"
    )


@pytest.mark.parametrize(("first", "then"), [(1, 4), (4, 1), (4, 2), (2, 4)])
async def test_another_number_of_partitions_is_refused_naming_the_one_in_place(
    bus: Bus, first: int, then: int
) -> None:
    from turnstream.bus.streams import (
        LogPartitionsDiffer,
        StreamLimits,
        StreamsMissing,
        check_streams,
        ensure_streams,
    )
    from turnstream.core.subjects import Subjects

    prefix = f"chg{first}to{then}"  # a deployment of its own on this server
    await ensure_streams(bus.js, Subjects(prefix, first), StreamLimits())
    with pytest.raises(LogPartitionsDiffer, match=f"TURNSTREAM_LOG_PARTITIONS={first} "):
        await ensure_streams(bus.js, Subjects(prefix, then), StreamLimits())
    # a service sees its own streams only: partition 0 says how many there are, and a
    # log of one stream is missing partitions (either way it refuses to start)
    refused = LogPartitionsDiffer if then > 1 and first > 1 else StreamsMissing
    with pytest.raises(refused, match="TURNSTREAM_LOG_PARTITIONS"):
        await check_streams(bus.js, Subjects(prefix, then))
    await check_streams(bus.js, Subjects(prefix, first))  # as it was: nothing changed
