"""Projection rebuild rate next to the raw ordered-consumer read rate, in one run.

    python bench/audit.py [--events 100000] [--sessions 500] [--rounds 5]

Builds a log of realistic turns (text turns of 17 events, one-tool turns of 31, ~1 KB
tool results, 50 sessions' turns interleaved at a time) in an embedded nats-server,
appended pipelined, then measures, alternating:
  read     the whole log through an ordered push consumer, each event decoded (the floor)
  rebuild  `turnstream audit rebuild`: read + decode + summaries and invariant checks
           folded + every session's summary written to the KV bucket (emptied first)
and, once each: the read without decoding, the fold alone over decoded events in memory,
and the audit service's start on this log (rebuild + every event recorded in the audit
file). First, with no server: the audit's fold of a delivered message into the auditor and
its audit file (`fold_message`) per message, best of the rounds (to compare with an older
revision, run both checkouts in turn). The machine is shared: compare figures within
one run.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import uuid_utils
from rich.console import Console

from turnstream.audit.auditor import READ_KINDS, Auditor
from turnstream.audit.checks import CheckConfig
from turnstream.audit.fold import fold_message
from turnstream.audit.journal import Journal
from turnstream.audit.projections import put_all
from turnstream.audit.rebuild import rebuild
from turnstream.bus import Bus, connect
from turnstream.bus.embedded import EmbeddedServer
from turnstream.bus.kv import KvWrites
from turnstream.bus.scan import scan_log
from turnstream.bus.streams import StreamLimits, ensure_streams
from turnstream.core.approval import ApprovalConfig
from turnstream.core.events import EVENT_ADAPTER, Event, decode, encode
from turnstream.core.subjects import Subjects

console = Console(highlight=False, soft_wrap=True)
CHECKS = CheckConfig(approval=ApprovalConfig(default_mode="auto"))
"""The deployment the log is of: its calls approved by `auto` mode, as `bench/turns.py`'s
(with the default `ask`, every one of its mode approvals is unjustified)."""
WORDS = "the quick brown fox jumps over the lazy dog while the log keeps every fact".split()
CONCURRENT = 50


def text(n: int, salt: int) -> str:
    return " ".join(WORDS[(salt + i) % len(WORDS)] for i in range(n))


class Turns:
    """Events of one turn as the services append them (ids, envelope, payloads)."""

    def __init__(self, start: datetime) -> None:
        self.clock = start
        self.counter = itertools.count()

    def turn(self, session: str, n: int, tool: bool) -> list[Event]:
        turn_id, trace = str(uuid_utils.uuid7()), str(uuid_utils.uuid7())
        out: list[Event] = []

        def add(kind: str, data: dict[str, Any], source: str = "turn-runner/bench-1") -> None:
            self.clock += timedelta(milliseconds=1)
            raw = {
                "id": str(uuid_utils.uuid7()),
                "type": kind,
                "time": self.clock,
                "sessionId": session,
                "chatId": session,
                "turnId": turn_id,
                "traceId": trace,
                "correlationId": f"key-{session}-{n}",
                "causationId": out[-1].id if out else None,
                "source": source,
                "data": data,
            }
            out.append(EVENT_ADAPTER.validate_python(raw))

        def stage(name: str, iteration: int) -> tuple[dict[str, Any], dict[str, Any]]:
            return (
                {"stage": name, "iteration": iteration},
                {"stage": name, "iteration": iteration, "outcome": "ok"},
            )

        def model_round(iteration: int, reply: dict[str, Any], stop: str) -> None:
            for name in ("COMPOSE_REQUEST", "SEND_REQUEST"):
                pre, post = stage(name, iteration)
                add("StagePreFired", pre)
                if name == "SEND_REQUEST":
                    started = {
                        "provider": "scripted",
                        "model": "demo",
                        "iteration": iteration,
                        "callIndex": n * 2 + iteration,
                        "messageCount": 2 * n + iteration,
                    }
                    add("ProviderRequestStarted", started)
                add("StagePostFired", post)
            pre, post = stage("STREAM_RESPONSE", iteration)
            add("StagePreFired", pre)
            completed = {
                "message": {"role": "assistant", "content": [reply]},
                "usage": {"inputTokens": 200 * n + 50, "outputTokens": 60},
                "stopReason": stop,
                "iteration": iteration,
            }
            add("ProviderRequestCompleted", completed)
            add("StagePostFired", post)

        sender = {"kind": "human", "id": "bench"}
        ask = text(14, n)
        accepted = {
            "kind": "message",
            "text": ask,
            "sender": sender,
            "idempotencyKey": f"key-{session}-{n}",
            "inboundSeq": next(self.counter),
        }
        add("InputAccepted", accepted, "gateway/bench-1")
        add("SessionTurnStart", {"inputId": out[0].id, "text": ask, "sender": sender})
        pre, post = stage("RECEIVE_INPUT", 1)
        add("StagePreFired", pre)
        add("StagePostFired", post)
        iteration = 1
        if tool:
            invocation = str(uuid_utils.uuid7())
            call = {"type": "tool_use", "id": "call-1", "name": "read_file"}
            model_round(1, {**call, "input": {"path": "notes.md"}}, "tool_use")
            pre, post = stage("TOOL_CALL", 1)
            add("StagePreFired", pre)
            proposed = {
                "invocationId": invocation,
                "callId": "call-1",
                "tool": "read_file",
                "args": {"path": "notes.md"},
                "index": 0,
                "iteration": 1,
                "readOnly": True,
            }
            add("ToolInvocationProposed", proposed)
            judged = {"invocationId": invocation, "mode": "auto", "verdict": "approve"}
            add("ToolCallModeInvoked", judged, "approval/bench-1")
            approved = {"invocationId": invocation, "authority": "mode"}
            add("ToolCallApproved", approved, "approval/bench-1")
            requested = {
                **{k: proposed[k] for k in ("invocationId", "callId", "tool", "args")},
                "readOnly": True,
                "idempotent": True,
                "timeoutMs": 30_000,
                "iteration": 1,
            }
            add("ToolInvocationRequested", requested)
            started = {"invocationId": invocation, "attempt": 1}
            add("ToolInvocationStarted", started, "tool-executor/bench-1")
            output = text(180, n)  # ~1 KB result
            result = {"invocationId": invocation, "output": output, "size": len(output)}
            add("ToolInvocationSucceeded", {**result, "durationMs": 0.8}, "tool-executor/bench-1")
            add("StagePostFired", post)
            iteration = 2
        reply = text(50, n + 3)
        model_round(iteration, {"type": "text", "text": reply}, "end_turn")
        pre, post = stage("RENDER", iteration)
        add("StagePreFired", pre)
        add("RenderEmitted", {"text": reply})
        add("StagePostFired", post)
        add("TurnEnded", {"status": "completed", "reply": reply, "iterations": iteration})
        add("SessionTurnEnd", {"status": "completed"})
        return out


def build_log(events: int, sessions: int) -> tuple[list[Event], int]:
    """Turns of `sessions` sessions, CONCURRENT sessions' turns interleaved at a time."""
    turns = Turns(datetime.now(UTC) - timedelta(hours=2))
    log: list[Event] = []
    count, n = 0, 0
    while len(log) < events:
        group = [f"bench-{(n + i) % sessions:04d}" for i in range(CONCURRENT)]
        batch = [turns.turn(s, n // sessions, tool=(n + i) % 2 == 0) for i, s in enumerate(group)]
        for step in itertools.zip_longest(*batch):
            log.extend(e for e in step if e is not None)
        count += len(batch)
        n += CONCURRENT
    return log, count


async def read_only(bus: Bus, *, decoded: bool = True) -> tuple[int, float]:
    count = [0]

    def on_event(seq: int, subject: str, data: bytes) -> None:
        if decoded:
            decode(data)
        count[0] += 1

    start = time.perf_counter()
    await scan_log(bus.js, bus.subjects, on_event)
    return count[0], time.perf_counter() - start


async def empty_sessions_bucket(bus: Bus) -> None:
    await bus.js.delete_key_value(bus.subjects.sessions_bucket)
    await ensure_streams(bus.js, bus.subjects, StreamLimits())


async def service_start(bus: Bus, folder: Path) -> float:
    """What the audit service does on start: fold + audit file + every summary written."""
    await empty_sessions_bucket(bus)
    start = time.perf_counter()
    auditor = Auditor.with_config(CHECKS)
    with Journal(folder / f"audit-{time.monotonic_ns()}.jsonl") as journal:
        await scan_log(bus.js, bus.subjects, partial(fold_message, auditor, journal))
        journal.flush()
        writes = KvWrites(bus.store.appender, bus.subjects.sessions_bucket)
        await put_all(writes, auditor.take_dirty())
    return time.perf_counter() - start


def fold_alone(events: list[Event]) -> float:
    auditor = Auditor.with_config(CHECKS)
    start = time.perf_counter()
    for seq, event in enumerate(events, 1):
        auditor.apply(seq, event)
    return len(events) / (time.perf_counter() - start)


def fold_per_message(log: list[Event], rounds: int, folder: Path) -> None:
    """µs of CPU per message of folding the log's messages (as delivered: subject and bytes)
    into an auditor and its audit file, best of `rounds`."""
    subjects = Subjects("ts")
    wire = [
        (seq, subjects.log(event.session_id, event.type), encode(event))
        for seq, event in enumerate(log, 1)
    ]
    best = float("inf")
    for round_ in range(rounds):
        gc.collect()  # a round does not pay for the last one's garbage
        auditor = Auditor.with_config(CHECKS)
        journal = Journal(folder / f"fold-{round_}.jsonl")
        start = time.process_time()  # CPU: other processes' share of the machine aside
        for seq, subject, data in wire:
            fold_message(auditor, journal, seq, subject, data)
        best = min(best, (time.process_time() - start) / len(wire) * 1e6)
    unread = sum(subject.rsplit(".", 1)[1] not in READ_KINDS for _, subject, _ in wire)
    console.print(
        f"audit fold of a delivered message ({len(wire):,} messages, {unread:,} of unread "
        f"kinds; best of {rounds}): {best:.2f} µs"
    )


async def main(args: argparse.Namespace) -> None:
    if args.fold_only:
        with tempfile.TemporaryDirectory() as tmp:
            fold_per_message(build_log(args.events, args.sessions)[0], args.rounds, Path(tmp))
        return
    with tempfile.TemporaryDirectory() as tmp, EmbeddedServer(Path(tmp) / "nats") as server:
        bus = await connect(server.url, Subjects("ts"), ensure=StreamLimits())
        try:
            start = time.perf_counter()
            log, turns = build_log(args.events, args.sessions)
            built = time.perf_counter() - start
            start = time.perf_counter()
            for offset in range(0, len(log), 2000):
                await bus.store.append_facts(log[offset : offset + 2000])
            appended = time.perf_counter() - start
            size = sum(len(e.model_dump_json(by_alias=True)) for e in log[:2000]) / 2000
            console.print(
                f"log: {len(log):,} events (~{size:.0f} B each), {turns:,} turns in "
                f"{args.sessions} sessions; built in {built:.1f} s, appended pipelined at "
                f"{len(log) / appended:,.0f} events/s"
            )
            fold_per_message(log[:20_000], args.rounds, Path(tmp))
            reads, rebuilds = [], []
            for round_ in range(1, args.rounds + 1):
                count, seconds = await read_only(bus)
                assert count == len(log)
                reads.append(count / seconds)
                await empty_sessions_bucket(bus)
                done = await rebuild(bus, CHECKS, datetime.now(UTC))
                assert done.events == len(log) and done.written == args.sessions
                assert done.unreported == 0, "a clean log must give no violations"
                rebuilds.append(done.rate)
                console.print(
                    f"  round {round_}: read {reads[-1]:,.0f} events/s · "
                    f"rebuild {rebuilds[-1]:,.0f} events/s"
                )
            read, built_rate = statistics.median(reads), statistics.median(rebuilds)
            console.print(
                f"(a) ordered-consumer read + decode: [bold]{read:,.0f} events/s[/] "
                f"(median; best {max(reads):,.0f})"
            )
            console.print(
                f"(b) projection rebuild (read + decode + fold + checks + {args.sessions} KV "
                f"writes): [bold]{built_rate:,.0f} events/s[/] (median; best {max(rebuilds):,.0f})"
            )
            console.print(
                f"rebuild / read = {built_rate / read:.2f} (best / best "
                f"{max(rebuilds) / max(reads):.2f}); the whole log in "
                f"{len(log) / built_rate:.2f} s vs {len(log) / read:.2f} s"
            )
            count, seconds = await read_only(bus, decoded=False)
            console.print(f"read without decoding (once): {count / seconds:,.0f} events/s")
            del log[20_000:]
            console.print(f"fold alone (decoded events in memory): {fold_alone(log):,.0f} events/s")
            seconds = await service_start(bus, Path(tmp))
            console.print(
                f"audit service start (rebuild + audit file of every event): "
                f"{seconds:.2f} s, {count / seconds:,.0f} events/s"
            )
        finally:
            await bus.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--fold-only", action="store_true", help="the fold per message alone (no server)"
    )
    asyncio.run(main(parser.parse_args()))
