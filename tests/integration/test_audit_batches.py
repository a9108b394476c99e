"""The audit's pull durable, read in batches: a batch with a bad message in the middle, a
redelivery after a restart checked once, the push durable of an earlier version replaced."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from nats.aio.msg import Msg

from tests.integration.test_audit import current_summary, journal_seqs, until, violations_of
from tests.unit.audit_events import ended, event, start, turn
from turnstream.audit import worker
from turnstream.audit.chain import verify
from turnstream.audit.checks import CheckConfig
from turnstream.audit.intake import Intake
from turnstream.bus import Bus
from turnstream.bus.appender import PipelinedAppender
from turnstream.bus.consume import define_pull, durable_push
from turnstream.bus.durables import ensure_durables
from turnstream.core.events import StagePreFired
from turnstream.core.subjects import session_key


@contextlib.asynccontextmanager
async def serving(bus: Bus, path: Path) -> AsyncIterator[worker.PartitionAudit]:
    service = worker.PartitionAudit(bus, 0, CheckConfig(), path, tick_s=60)
    stop = asyncio.Event()
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(service.serve(stop))
        try:
            await until(lambda: _waiting(bus))  # past its start's scan, asking for more
            yield service
        finally:
            stop.set()


async def _waiting(bus: Bus) -> bool:
    with contextlib.suppress(Exception):
        info = await consumer(bus)
        return info.config.deliver_subject is None and info.num_waiting > 0
    return False


async def consumer(bus: Bus) -> Any:
    return await bus.js.consumer_info(bus.subjects.log_stream, worker.DURABLE)


async def acked_to(bus: Bus, seq: int) -> Any:
    async def check() -> Any:
        info = await consumer(bus)
        return info if info.ack_floor.stream_seq >= seq and not info.num_ack_pending else None

    return await until(check)


async def test_a_push_durable_of_an_earlier_version_is_replaced_after_its_ack_floor(
    bus: Bus, tmp_path: Path
) -> None:
    await bus.store.append_facts(turn("pushed", "t1"))
    floor = await bus.store.last_seq("pushed")
    acked = asyncio.Event()

    async def ack(msg: Msg) -> None:
        await msg.ack()
        if msg.metadata.sequence.stream == floor:
            acked.set()

    subjects = bus.subjects
    old = await durable_push(
        bus.js,
        subjects.log_stream,
        worker.DURABLE,
        subjects.deliver(worker.DURABLE),
        [subjects.log_all],
        ack,
        ack_all=True,
    )
    await asyncio.wait_for(acked.wait(), 10)
    await old.unsubscribe()
    await bus.store.append_facts(turn("pulled", "t1"))  # while no audit runs
    await ensure_durables(bus.js, subjects, 10.0)  # the setup step replaces it
    async with serving(bus, tmp_path / "audit.jsonl") as service:
        await bus.store.append_facts(turn("pulled-later", "t1"))
        last = await bus.store.last_seq("pulled-later")
        info = await acked_to(bus, last)
        assert service.journal.last_seq == last
    assert info.config.deliver_subject is None  # a pull consumer now
    assert info.config.opt_start_seq == floor + 1  # after the old one's ack floor
    seqs = journal_seqs(tmp_path / "audit.jsonl")
    assert seqs == list(range(1, last + 1))


async def test_a_batch_with_a_bad_message_in_the_middle_is_recorded_in_order(
    bus: Bus, tmp_path: Path
) -> None:
    path = tmp_path / "audit.jsonl"
    async with serving(bus, path):
        first = await bus.store.last_seq("bad-batch") or 0
        stage = event(StagePreFired, "bad-batch", "t1", {"stage": "RENDER", "iteration": 1})
        await bus.store.append_facts([start("bad-batch", "t1"), stage])
        await bus.js.publish(bus.subjects.log("bad-batch-junk", "StagePreFired"), b"{not")
        await bus.store.append_facts([ended("bad-batch", "t1"), ended("bad-batch", "t1")])

        async def one_violation() -> list[Any] | None:
            found = await violations_of(bus, "bad-batch")
            return found if found else None

        (violation,) = await until(one_violation)
        last = await bus.store.last_seq("bad-batch")  # the violation, appended by the audit
        await acked_to(bus, last)
        summary = await current_summary(bus, "bad-batch")
    assert violation.data.kind == "duplicate_terminal" and first == 0
    assert (summary.events, summary.violations, summary.completed) == (5, 1, 2)
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    mine = [line for line in lines if line.get("sessionId") == "bad-batch" or "subject" in line]
    assert mine[2]["subject"] == "ts.log.bad-batch-junk.StagePreFired"
    assert [line.get("type", "undecodable") for line in mine] == [
        "SessionTurnStart",
        "StagePreFired",
        "undecodable",
        "TurnEnded",
        "TurnEnded",
        "AuditViolation",
    ]
    assert [line["seq"] for line in lines] == list(range(1, last + 1))
    raw = path.read_bytes().splitlines(keepends=True)
    assert verify(raw).ok
    bad = len(raw) - 3
    raw[bad] = raw[bad].replace(b'"TurnEnded"', b'"TurnEndeD"')
    verdict = verify(raw)
    assert not verdict.ok and verdict.bad_line == bad + 1  # 1-based


async def test_a_redelivery_after_a_restart_is_checked_once(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first instance folds and records a duplicate end and stops without acking: the
    server redelivers it to the second, which has it from the log already."""
    subjects = bus.subjects
    await define_pull(  # the audit's durable, with a short ack wait
        bus.js, subjects.log_stream, worker.DURABLE, [subjects.log_all], ack_all=True, ack_wait_s=1
    )
    path = tmp_path / "audit.jsonl"

    async def no_ack(intake: Intake, msg: Any) -> None:
        pass

    with monkeypatch.context() as patch:
        patch.setattr(Intake, "ack", no_ack)
        async with serving(bus, path) as service:
            await bus.store.append_facts([*turn("again", "t1"), ended("again", "t1")])
            found = await until(lambda: violations_of(bus, "again"))
            last = await bus.store.last_seq("again")
            await until(lambda: _at(service, last))
    before = await consumer(bus)
    assert before.num_ack_pending > 0
    async with serving(bus, path) as service:
        info = await acked_to(bus, last)
        deliveries = info.delivered.consumer_seq - before.delivered.consumer_seq
        assert deliveries > info.delivered.stream_seq - before.delivered.stream_seq  # again
        await bus.store.append_facts(turn("again-after", "t1"))
        summary = await current_summary(bus, "again")
        await acked_to(bus, await bus.store.last_seq("again-after"))
    assert [v.data.kind for v in found] == ["duplicate_terminal"]
    assert len(await violations_of(bus, "again")) == 1
    assert summary.events == len(await bus.store.read_session("again"))
    seqs = journal_seqs(path)
    assert seqs == list(range(1, seqs[-1] + 1))
    assert verify(path.read_bytes().splitlines()).ok


async def _at(service: worker.PartitionAudit, seq: int) -> bool:
    return service.journal.last_seq >= seq


async def test_an_idle_audit_asks_seldom_and_stops_at_once(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[dict[str, Any]] = []
    ask = Intake._ask

    async def counted(self: Intake, request: dict[str, Any], *args: Any) -> None:
        asked.append(request)
        await ask(self, request, *args)

    monkeypatch.setattr(Intake, "_ask", counted)
    service = worker.PartitionAudit(bus, 0, CheckConfig(), tmp_path / "audit.jsonl", tick_s=60)
    stop = asyncio.Event()
    serving_task = asyncio.create_task(service.serve(stop))
    await until(lambda: _waiting(bus))
    await asyncio.sleep(1.5)
    stop.set()
    await asyncio.wait_for(serving_task, 1.0)  # not at the end of the waiting request
    assert len(asked) == 1 and asked[0]["batch"] == 1


async def test_a_refused_pull_is_not_asked_again_at_once(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[dict[str, Any]] = []
    ask = Intake._ask

    async def counted(self: Intake, request: dict[str, Any], *args: Any) -> None:
        asked.append(request)
        await ask(self, request, *args)

    monkeypatch.setattr(Intake, "_ask", counted)
    async with serving(bus, tmp_path / "audit.jsonl"):
        await bus.js.delete_consumer(bus.subjects.log_stream, worker.DURABLE)
        await bus.store.append_facts(turn("refused", "t1"))  # the waiting request ends
        await asyncio.sleep(2.5)
    assert 1 <= len(asked) <= 5  # about one a second, not a loop


async def test_the_summaries_of_a_batch_are_written_in_one_flight(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Turns that start together are written at once, all in one pipelined flight (one
    reply subscription for the acks), not a request each."""
    flights: list[list[str]] = []
    publish = PipelinedAppender.publish

    async def counted(self: PipelinedAppender, items: Any, timeout: float) -> list[int]:
        flights.append([subject for subject, _, _ in items])
        return await publish(self, items, timeout)

    monkeypatch.setattr(PipelinedAppender, "publish", counted)
    subjects = bus.subjects  # the durable (a test before may have deleted it)
    await define_pull(bus.js, subjects.log_stream, worker.DURABLE, [subjects.log_all], ack_all=True)
    sessions = [f"flight-{n}" for n in range(5)]
    async with serving(bus, tmp_path / "audit.jsonl"):
        await bus.store.append_facts([start(s, "t1") for s in sessions])
        summaries = [await current_summary(bus, s) for s in sessions]
    assert [s.status for s in summaries] == ["active"] * 5
    keys = {f"$KV.{bus.subjects.sessions_bucket}.{session_key(s)}" for s in sessions}
    written = [flight for flight in flights if keys & set(flight)]
    assert len(written) == 1 and keys <= set(written[0])
