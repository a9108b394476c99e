"""Turns kept flowing through a fleet, and what the log must show afterwards.

`Load` runs one client per session: send a `message` (idempotency key `<session>-t<i>`),
wait for its `TurnEnded`, send the next, until told to stop; every `InteractionRequested`
stored in the log is approved as a client would. Both are read from the stream (ordered
consumers), not from core subscriptions: a core subscriber sees a publish before the
stream stored it, and an answer to a prompt not stored yet is rejected by the gateway
(`unknown_interaction`), as it must be. A client that has heard nothing for `ASK_S` reads
its session's last `TurnEnded` and `InteractionRequested` from the stream (an ordered
consumer starved of CPU misses its heartbeats and is recreated; once one stalled for good).

`verify` reads the whole log back and names every turn lost or doubled, every side effect
run twice, every audit violation and every session whose rebuilt state differs from the
turn-runner's live one.
Used by `tests/cluster/test_elastic.py` and `bench/scale.py` part 2.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import nats.errors
import orjson
from nats.js import api
from nats.js.errors import NoStreamResponseError, NotFoundError

from turnstream.bus import Bus
from turnstream.bus.ordered import ordered_subscribe
from turnstream.bus.scan import log_last_seq
from turnstream.client import answer_command, live_state, message_command, publish_command
from turnstream.core.events import Event
from turnstream.core.session import SessionState, fold, state_from_json

TURN_TIMEOUT_S = 120.0
"""How long one client waits for its turn's end before it counts it as not seen."""
ASK_S = 3.0
"""How long a client waits for a delivery before it asks the stream itself."""


async def send_retrying(client: Bus, command: dict[str, Any]) -> int:
    """Publish until acked (no leader for a moment: no responders or a timeout); the
    idempotency key (Nats-Msg-Id) keeps a retry from adding a second command."""
    for _ in range(200):
        try:
            return await publish_command(client, str(command["sessionId"]), command)
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError, NoStreamResponseError):
            await asyncio.sleep(0.1)
    raise AssertionError(f"the cluster never took {command['idempotencyKey']}")


@dataclass
class Load:
    """Clients of `sessions`, sending as `client` and watching the log as `operator`."""

    client: Bus
    operator: Bus
    reader: Bus
    """Reads the stream (a user that may answer flow control: the operator may not)."""
    sessions: list[str]
    accepted: dict[str, str] = field(default_factory=dict)
    """Each command the inbound stream acked: idempotency key → session."""
    ended: int = 0
    """TurnEnded events seen (published: the stored log is checked in `verify`)."""
    latencies: list[float] = field(default_factory=list)
    unseen: list[str] = field(default_factory=list)
    """Keys whose TurnEnded the client gave up waiting for."""
    answered: set[str] = field(default_factory=set)
    watchers: list[Callable[[str, str, bytes, float], None]] = field(default_factory=list)
    """Called with (session, event type, data, arrival time) for every event published."""
    rate: float | None = None
    """Turns started per second at most, over all sessions (None: each client sends its
    next turn as soon as its last one ended)."""

    def __post_init__(self) -> None:
        self._waiters: dict[str, asyncio.Future[float]] = {}
        self._progress = asyncio.Condition()
        self._answers: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self._subs: list[Any] = []
        self._next_send = 0.0

    async def run(self, stop: asyncio.Event) -> None:
        """Until `stop`: every session's client sends turns one after another; then each
        waits for its last turn (at most `TURN_TIMEOUT_S`)."""
        subjects = self.operator.subjects
        self._subs.append(await self.operator.nc.subscribe(subjects.log_all, cb=self._on_event))
        for stream in subjects.log_streams:  # each partition's stream named: none is default
            for kind, cb in (
                ("TurnEnded", self._on_ended),
                ("InteractionRequested", self._on_asked),
            ):
                self._subs.append(
                    await ordered_subscribe(  # named in the subject: a reader's right
                        self.reader.js,
                        subjects.log_kind(kind),
                        stream=stream,
                        cb=cb,
                        config=api.ConsumerConfig(deliver_policy=api.DeliverPolicy.NEW),
                    )
                )
        try:
            async with asyncio.TaskGroup() as tasks:
                answering = tasks.create_task(self._answer())
                async with asyncio.TaskGroup() as clients:
                    for session in self.sessions:
                        clients.create_task(self._client(session, stop))
                answering.cancel()
        finally:
            for sub in self._subs:
                await sub.unsubscribe()

    async def until_ended(self, count: int, timeout: float = 120) -> None:
        """Until `count` turns have ended in all (progress, not time, paces a test)."""
        async with asyncio.timeout(timeout), self._progress:
            await self._progress.wait_for(lambda: self.ended >= count)

    async def _client(self, session: str, stop: asyncio.Event) -> None:
        turn = 0
        while not stop.is_set():
            key = f"{session}-t{turn}"
            waiter = asyncio.get_running_loop().create_future()
            self._waiters[key] = waiter
            await self._paced()
            started = time.perf_counter()
            await send_retrying(self.client, message_command(session, "go", idempotency_key=key))
            self.accepted[key] = session
            try:
                done = await self._wait(session, key, waiter)
                self.latencies.append(done - started)
            except TimeoutError:
                self.unseen.append(key)
            turn += 1

    async def _paced(self) -> None:
        """Until this client's send is due under `rate` (sends spaced 1 / rate apart)."""
        if not self.rate:
            return
        now = time.perf_counter()
        due = max(now, self._next_send)
        self._next_send = due + 1 / self.rate
        await asyncio.sleep(due - now)

    async def _wait(self, session: str, key: str, waiter: asyncio.Future[float]) -> float:
        """The time the turn of `key` ended, asking the stream when deliveries are late."""
        deadline = time.perf_counter() + TURN_TIMEOUT_S
        while True:
            try:
                return await asyncio.wait_for(asyncio.shield(waiter), ASK_S)
            except TimeoutError:
                if time.perf_counter() > deadline:
                    raise
            ended = await self._last_stored(session, "TurnEnded")
            if ended is not None and ended["correlationId"] == key:
                await self._end(key, time.perf_counter())
            asked = await self._last_stored(session, "InteractionRequested")
            if asked is not None:  # answered already: the answer's key deduplicates it
                self._answers.put_nowait((session, asked["data"]["interactionId"]))

    async def _last_stored(self, session: str, kind: str) -> dict[str, Any] | None:
        subjects = self.operator.subjects
        try:  # as the operator: the audit's user may not get a message by subject
            msg = await self.operator.js.get_last_msg(
                subjects.log_stream_of(session), subjects.log(session, kind)
            )
        except Exception:  # none, or no leader for a moment
            return None
        return orjson.loads(msg.data)  # type: ignore[no-any-return]

    async def _on_event(self, msg: Any) -> None:
        at = time.perf_counter()
        subjects = self.operator.subjects  # a partitioned log's live subject ends in `.<k>`
        session, kind = subjects.session_from_log(msg.subject), subjects.type_from_log(msg.subject)
        for watch in self.watchers:
            watch(session, kind, msg.data, at)

    async def _on_asked(self, msg: Any) -> None:
        event = orjson.loads(msg.data)
        self._answers.put_nowait((event["sessionId"], event["data"]["interactionId"]))

    async def _on_ended(self, msg: Any) -> None:
        await self._end(orjson.loads(msg.data)["correlationId"], time.perf_counter())

    async def _end(self, key: str, at: float) -> None:
        waiter = self._waiters.pop(key, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(at)
            async with self._progress:
                self.ended += 1
                self._progress.notify_all()

    async def _answer(self) -> None:
        """Approve each prompt once (a prompt asked again after a takeover: deduplicated by
        the answer's idempotency key, `answer-<interaction id>`)."""
        while True:
            session, interaction_id = await self._answers.get()
            self.answered.add(interaction_id)
            await send_retrying(self.client, answer_command(session, interaction_id, "approve"))


@dataclass
class Verdict:
    """What the log shows after a load; `problems` is empty when everything held."""

    turns: int
    events: int
    statuses: Counter[str]
    runs: int
    interrupted_calls: int
    prompts: int
    problems: dict[str, object]

    def summary(self) -> str:
        return (
            f"{self.turns} turns ({dict(self.statuses)}), {self.events} events, {self.runs} "
            f"tool runs, {self.interrupted_calls} calls failed interrupted, {self.prompts} "
            f"prompts answered"
        )


async def wait_quiet(operator: Bus, quiet_s: float = 2.0, timeout: float = 120) -> dict[str, int]:
    """Until no stream of the log has grown for `quiet_s`; each one's last sequence."""
    subjects = operator.subjects
    async with asyncio.timeout(timeout):
        last: dict[str, int] = {}
        while True:
            with contextlib.suppress(nats.errors.TimeoutError):
                now = {
                    stream: await log_last_seq(operator.js, subjects, stream=stream)
                    for stream in subjects.log_streams
                }
                if now == last:
                    return now
                last = now
            await asyncio.sleep(quiet_s)


async def audit_caught_up(operator: Bus, last_seqs: dict[str, int], timeout: float = 60) -> None:
    """Until the audit has acked each stream of the log up to its sequence in `last_seqs`
    (the durable `audit` on every partition: its violations are appended)."""
    async with asyncio.timeout(timeout):
        for stream, last_seq in last_seqs.items():
            while True:
                with contextlib.suppress(nats.errors.TimeoutError, NotFoundError):
                    info = await operator.js.consumer_info(stream, "audit")
                    if info.ack_floor.stream_seq >= last_seq:
                        break
                await asyncio.sleep(0.5)


async def verify(
    reader: Bus, operator: Bus, accepted: dict[str, str], runs: list[str], *, live: bool = True
) -> Verdict:
    """Read the whole log: one TurnEnded per accepted command, none for anything else; each
    invocation's side effect at most once and every succeeded one exactly once; no
    `AuditViolation`; each session's state rebuilt from the log equals the live one.
    `reader` reads the log: the operator may not answer a consumer's flow control (its
    long reads stall), the audit's user may."""
    stored = await reader.store.read_all()
    log: list[Event] = [s.event for s in stored]
    by_session: dict[str, list[Event]] = defaultdict(list)
    for event in log:
        by_session[event.session_id].append(event)
    ended_by_key: dict[str, list[Event]] = defaultdict(list)
    ended_by_turn: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    for event in log:
        if event.type == "TurnEnded":
            ended_by_key[event.correlation_id or ""].append(event)
            ended_by_turn[event.turn_id or ""] += 1
            statuses[event.data.status] += 1

    def of(kind: str) -> list[str]:
        return [getattr(e.data, "invocation_id", "") for e in log if e.type == kind]

    ran = Counter(runs)
    succeeded, started = Counter(of("ToolInvocationSucceeded")), set(of("ToolInvocationStarted"))
    failed = [e for e in log if e.type == "ToolInvocationFailed"]
    problems: dict[str, object] = {
        "lost (accepted, no TurnEnded; the session's last events)": {
            k: [e.type for e in by_session[accepted[k]][-6:]]
            for k in sorted(accepted)
            if k not in ended_by_key
        },
        "turns ended more than once": {t: n for t, n in ended_by_turn.items() if n > 1},
        "commands with several turns": {
            k: [e.turn_id for e in ends]
            for k, ends in ended_by_key.items()
            if len({e.turn_id for e in ends}) > 1
        },
        "TurnEnded for no accepted command": sorted(set(ended_by_key) - set(accepted)),
        "side effects run more than once": {i: n for i, n in ran.items() if n > 1},
        "succeeded, not run exactly once": sorted(i for i in succeeded if ran[i] != 1),
        "invocations with more than one result": {
            i: n
            for i, n in Counter(
                of("ToolInvocationSucceeded")
                + of("ToolInvocationFailed")
                + of("ToolInvocationCancelled")
            ).items()
            if n > 1
        },
        "run but never started": sorted(set(ran) - started),
        "turns not completed": sorted(
            f"{e.session_id}/{e.correlation_id}: {e.data.status} {e.data.failure_class} "
            f"{e.data.reason}"
            for ends in ended_by_key.values()
            for e in ends
            if e.data.status != "completed"
        ),
        "answers rejected (the prompt: when, by whom; the rejection: when, by whom)": [
            f"{e.session_id} {e.data.reason}: "
            + "; ".join(
                f"{a.type} at {a.time:%H:%M:%S.%f} by {a.source}"
                for a in by_session[e.session_id]
                if a.id == e.id
                or (
                    a.type == "InteractionRequested"
                    and f"answer-{a.data.interaction_id}" == e.correlation_id
                )
            )
            for e in log
            if e.type == "InputRejected" and (e.correlation_id or "").startswith("answer-")
        ],
        "audit violations": [
            f"{e.session_id}: {e.data.kind}: {e.data.detail}"
            for e in log
            if e.type == "AuditViolation"
        ],
    }
    if live:
        problems["replay --verify fails"] = [
            session
            for session in sorted(set(accepted.values()))
            if state_from_json(await live_state(operator, session, 10))
            != fold(SessionState.of(session), by_session[session])
        ]
    return Verdict(
        turns=sum(len(e) for e in ended_by_key.values()),
        events=len(log),
        statuses=statuses,
        runs=len(runs),
        interrupted_calls=len(failed),
        prompts=len(of("InteractionRequested")),
        problems={k: v for k, v in problems.items() if v},
    )
