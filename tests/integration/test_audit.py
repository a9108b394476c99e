"""The audit service over a real nats-server: summaries in KV, violations, the audit file."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pytest
from nats.errors import NoRespondersError

from tests.integration.conftest import running_services, settings_for
from tests.unit.audit_events import ended, start, tool_run, turn
from turnstream.audit import app as audit
from turnstream.audit import worker
from turnstream.audit.app import check_config
from turnstream.audit.chain import verify
from turnstream.audit.journal import JOURNAL_FILE, Journal
from turnstream.audit.projections import read_all
from turnstream.audit.rebuild import rebuild
from turnstream.bus import Bus
from turnstream.bus.embedded import EmbeddedServer
from turnstream.client import message_command, send_and_wait
from turnstream.core.events import AuditViolation, encode
from turnstream.core.subjects import session_key
from turnstream.core.summary import SessionSummary
from turnstream.settings import Settings

T = TypeVar("T")
SCRIPT = """
replies:
  - tool_calls: [{name: list_dir, arguments: {path: "."}}]
  - text: "echo: {input}"
"""


@contextlib.asynccontextmanager
async def running_audit(settings: Settings) -> AsyncIterator[None]:
    stop = asyncio.Event()
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(audit.serve(settings, stop, tick_s=0.2))
        try:
            yield
        finally:
            stop.set()


async def until(check: Callable[[], Awaitable[T | None]], timeout: float = 15) -> T:
    async with asyncio.timeout(timeout):
        while True:
            result = await check()
            if result:
                return result
            await asyncio.sleep(0.05)


async def summary_of(bus: Bus, session: str) -> SessionSummary | None:
    kv = await bus.js.key_value(bus.subjects.sessions_bucket)
    try:
        entry = await kv.get(session_key(session))
    except Exception:
        return None
    return SessionSummary.from_json(entry.value) if entry.value else None


async def current_summary(bus: Bus, session: str) -> SessionSummary:
    """The session's summary once it covers the session's last event."""
    last = await bus.store.last_seq(session)

    async def check() -> SessionSummary | None:
        summary = await summary_of(bus, session)
        return summary if summary and summary.last_seq >= last else None

    return await until(check)


async def violations_of(bus: Bus, session: str) -> list[AuditViolation]:
    stored = await bus.store.read_session(session)
    return [s.event for s in stored if isinstance(s.event, AuditViolation)]


def journal_seqs(path: Path) -> list[int]:
    return [orjson.loads(line)["seq"] for line in path.read_bytes().splitlines()]


def kept_aside(folder: Path) -> list[Path]:
    return list(folder.glob("audit-*.jsonl"))


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("audit")


@pytest.fixture(scope="module")
def settings(nats_server: EmbeddedServer, data: Path) -> Settings:
    script = data / "script.yaml"
    script.write_text(SCRIPT)
    return settings_for(nats_server, data, script=script)


async def test_a_turn_shows_up_as_a_summary_in_kv(bus: Bus, settings: Settings) -> None:
    async with running_services(settings, bus), running_audit(settings):
        outcome = await send_and_wait(bus, message_command("audit-1", "hello"), timeout=15)
        assert outcome.completed
        summary = await current_summary(bus, "audit-1")
    assert summary.status == "completed" and summary.open_turn is None
    assert (summary.turns, summary.completed, summary.tool_calls) == (1, 1, 1)
    assert summary.last_reply == "echo: hello"
    assert summary.input_tokens > 0 and summary.violations == 0
    assert await violations_of(bus, "audit-1") == []  # the tool call was approved
    assert [s.session_id for s in await read_all(await bus.js.key_value("ts_sessions"))] == [
        "audit-1"
    ]
    journal = settings.data_dir / JOURNAL_FILE
    verdict = verify(journal.read_bytes().splitlines())
    assert verdict.ok and verdict.last_seq >= summary.last_seq


async def test_replay_and_verify_over_request_reply(bus: Bus, settings: Settings) -> None:
    async with running_services(settings, bus), running_audit(settings):
        outcome = await send_and_wait(bus, message_command("audit-api", "hi"), timeout=15)
        assert outcome.completed
        first_seq = (await bus.store.read_session("audit-api"))[0].seq

        async def ask(verb: str, query: dict[str, object]) -> dict[str, Any]:
            subject = bus.subjects.api("audit", verb)
            reply = await bus.nc.request(subject, orjson.dumps(query), timeout=10)
            return dict(orjson.loads(reply.data))

        verified = await until(lambda: _equal(ask("verify", {"sessionId": "audit-api"})))
        replayed = await ask("replay", {"sessionId": "audit-api"})
        early = await ask("replay", {"sessionId": "audit-api", "atSeq": first_seq})
    assert verified["equal"] and verified["log"] == verified["live"]
    assert replayed["state"]["turns_ended"] == 1 and replayed["events"] == verified["events"]
    assert early["events"] == 1 and early["state"]["turns_ended"] == 0


async def _equal(pending: Awaitable[dict[str, Any]]) -> dict[str, Any] | None:
    try:
        answer = await pending
    except NoRespondersError:  # the audit task started a moment ago: not listening yet
        return None
    return answer if answer.get("equal") else None  # the runner's acks may trail the reply


async def test_a_bad_log_gives_each_violation_once(bus: Bus, settings: Settings) -> None:
    now = datetime.now(UTC)
    bad = [
        *turn("bad-log", "t1"),
        ended("bad-log", "t1", "failed"),  # a second terminal event
        start("bad-log", "t2"),
        *tool_run("bad-log", "t2", "inv-x", approved=False),
        ended("bad-log", "t2"),
        start("bad-log", "t3", at=now - timedelta(hours=2)),  # never ends
    ]
    await bus.store.append_facts(bad)

    async def three() -> list[AuditViolation] | None:
        found = await violations_of(bus, "bad-log")
        return found if len(found) >= 3 else None

    async with running_audit(settings):
        found = await until(three)
        summary = await current_summary(bus, "bad-log")
    assert sorted(v.data.kind for v in found) == [
        "duplicate_terminal",
        "turn_overdue",
        "unapproved_tool_run",
    ]
    assert summary.violations == 3 and summary.status == "active" and summary.open_turn == "t3"
    # a restart folds the log again, finds the same violations, and appends none of them
    async with running_audit(settings):
        await bus.store.append_facts(turn("after-restart", "t1"))
        await current_summary(bus, "after-restart")
    assert len(await violations_of(bus, "bad-log")) == 3


async def test_a_restart_continues_the_audit_file(bus: Bus, settings: Settings) -> None:
    journal = settings.data_dir / JOURNAL_FILE
    async with running_audit(settings):
        await bus.store.append_facts(turn("chain-1", "t1"))
        await current_summary(bus, "chain-1")
    before = journal_seqs(journal)
    await bus.store.append_facts(turn("chain-2", "t1", tools=1))  # while the audit is down
    async with running_audit(settings):
        await bus.store.append_facts(turn("chain-3", "t1"))
        await current_summary(bus, "chain-3")
    seqs = journal_seqs(journal)
    assert seqs[: len(before)] == before
    assert seqs == list(range(1, seqs[-1] + 1))  # every event once, in order
    assert seqs[-1] == await bus.store.last_seq("chain-3")
    assert verify(journal.read_bytes().splitlines()).ok


async def test_rebuild_restores_summaries_and_leaves_newer_ones(
    bus: Bus, settings: Settings
) -> None:
    """The rebuild judges the log by the deployment's settings, as the service does (the
    turns of this module ran in auto mode: their runner's approvals are justified)."""
    kv = await bus.js.key_value(bus.subjects.sessions_bucket)
    await kv.delete(session_key("audit-1"))
    await kv.put(session_key("chain-1"), SessionSummary("chain-1", last_seq=1).to_json())
    newest = SessionSummary("chain-3", last_seq=10**9)
    await kv.put(session_key("chain-3"), newest.to_json())
    done = await rebuild(bus, check_config(settings), datetime.now(UTC))
    assert done.events == done.last_seq and done.sessions >= 5
    assert done.written == 2  # audit-1 and chain-1; the service keeps the rest current
    restored = {s.session_id: s for s in await read_all(kv)}
    assert restored["audit-1"].completed == 1
    assert restored["chain-1"].last_seq == await bus.store.last_seq("chain-1")
    assert restored["chain-3"] == newest
    again = await rebuild(bus, check_config(settings), datetime.now(UTC))
    assert again.written == 0 and again.violations_in_log == 3 and again.unreported == 0


async def test_a_file_of_another_log_is_kept_aside_and_a_new_chain_starts(
    bus: Bus, nats_server: EmbeddedServer, tmp_path: Path
) -> None:
    settings = settings_for(nats_server, tmp_path)
    journal = settings.data_dir / JOURNAL_FILE
    old = turn("elsewhere", "t1")[0]
    with Journal(journal) as file:  # e.g. a log the server store no longer has
        file.add(10**9, old, encode(old))
    async with running_audit(settings):
        await bus.store.append_facts(turn("fresh-chain", "t1"))
        await current_summary(bus, "fresh-chain")
    (kept,) = kept_aside(tmp_path)
    assert journal_seqs(kept) == [10**9]
    seqs = journal_seqs(journal)
    assert seqs[0] == 1 and seqs[-1] == await bus.store.last_seq("fresh-chain")
    assert verify(journal.read_bytes().splitlines()).ok


async def test_a_forgotten_session_is_read_back_when_it_comes_again(
    bus: Bus, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker, "KEEP_SUMMARIES", 1)  # forgetting starts past 1.25 summaries
    journal = settings.data_dir / JOURNAL_FILE
    service = worker.PartitionAudit(bus, 0, audit.check_config(settings), journal, tick_s=0.2)
    stop = asyncio.Event()

    async def forgotten() -> bool:
        # the fold forgets after a batch is written: under load the batch that drops
        # forget-a may still be in flight, so wait for both rather than sample once
        summaries = service.auditor.summaries
        return "forget-a" not in summaries and len(summaries) <= 2

    async with running_services(settings, bus), asyncio.TaskGroup() as tasks:
        tasks.create_task(service.serve(stop))
        try:
            for session in ("forget-a", "forget-b", "forget-c"):
                outcome = await send_and_wait(bus, message_command(session, "hi"), timeout=15)
                assert outcome.completed
                await current_summary(bus, session)
            await until(forgotten)
            outcome = await send_and_wait(bus, message_command("forget-a", "again"), timeout=15)
            summary = await current_summary(bus, "forget-a")
        finally:
            stop.set()
    assert (summary.turns, summary.completed, summary.tool_calls) == (2, 2, 2)
    assert summary.last_reply == "echo: again"
    assert await violations_of(bus, "forget-a") == []
