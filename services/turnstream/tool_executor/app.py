"""tool-executor shell: claim, validate, run with a timeout, append the result, ack.

Only a call the log justifies runs: the turn-runner may append `ToolCallApproved` (it
applies the approval rules itself), so before claiming a call the executor re-derives its
approval from facts the runner cannot append (`core.justification`, `grounds.py`): the
session's security mode (its agent profile's, else this executor's default) or allowlist,
an attached workflow's stage tools, or a person's approval of this very call. One that is
not justified is failed `policy_denied` (`approval_not_justified`) and never claimed.

At most once per invocation id: the claim `invocation.<id>` is created in the KV bucket
before the tool runs (create fails if it exists). A request redelivered after its result
was appended finds the claim `done` and is only acked. A claim still `running` with no
live task here means an executor died mid-run: if the log has the invocation's result (it
died between that append and marking the claim done) the claim is marked done; else an
idempotent tool runs again, any other is failed with `interrupted, mayHaveRun: true`.
Claims are kept `TURNSTREAM_INVOCATION_MAX_AGE_DAYS` (the bucket's TTL); a request older
than half of that is not run, since its claim may be gone: failed `expired, mayHaveRun`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import orjson
from nats.js.errors import KeyNotFoundError, ObjectNotFoundError

from turnstream.bus import Bus
from turnstream.bus.appender import LogFull
from turnstream.bus.consume import InProgress, log_push
from turnstream.bus.durables import TOOL_EXECUTOR
from turnstream.bus.full import backoff_s
from turnstream.bus.kv import KvWrites
from turnstream.bus.retry import retried, stoppable
from turnstream.bus.scan import scan_log
from turnstream.core.approval import ApprovalConfig
from turnstream.core.events import (
    FailureClass,
    ToolInvocationFailed,
    ToolInvocationFailedData,
    ToolInvocationRequested,
    ToolInvocationSucceeded,
    TurnEnded,
    decode,
)
from turnstream.core.justification import Justified
from turnstream.runtime import now, run_service, service_bus, source_name, telemetry
from turnstream.runtime.manifest import keep_published
from turnstream.runtime.redaction import Redactor
from turnstream.settings import Settings
from turnstream.tool_executor.attachments import session_attachment
from turnstream.tool_executor.grounds import SessionGrounds
from turnstream.tool_executor.outcome import Facts, needs_blob
from turnstream.tool_executor.writes import Started
from turnstream.tools import ToolContext, ToolError, ToolRegistry
from turnstream.tools.mcp import McpTools

log = logging.getLogger("turnstream.tool_executor")
DURABLE = TOOL_EXECUTOR.name
RUNNING, DONE = b"running", b"done"
RESULTS = ("ToolInvocationSucceeded", "ToolInvocationFailed", "ToolInvocationCancelled")
"""The facts that end an invocation: one in the log means the call needs nothing more."""
BLOB_TIMEOUT_S = 30.0
RETRY_MAX_S = 5.0
"""Longest wait between retries of an append while the broker is away."""
SHUTDOWN_GRACE_S = 10.0
"""At shutdown, how long the calls that have finished get to append their results (the
broker may be away); then they are given up, their claims left `running` for the next
executor (which fails such a call `interrupted, mayHaveRun` or runs an idempotent one
again). Calls still running are stopped at once, as before."""
ACK_WAIT_S = TOOL_EXECUTOR.ack_wait_s
"""A request not acked this long is redelivered: how soon a call whose executor died is
found (and failed `interrupted` or run again). A running call keeps its request with
in-progress acks, so a long tool is not redelivered while it runs."""
START_GRACE_S = 0.02
"""A read-only tool that finishes this soon has its `Started` appended with its result, in
one batch; a slower one's goes out at this point, while it runs (what it does outside
is nothing a result would not say, so only a watcher of the log sees the difference)."""


class Executor:
    def __init__(
        self,
        bus: Bus,
        registry: ToolRegistry,
        workspace: Path,
        *,
        budget: int = 16_000,
        concurrency: int = 32,
        clock: Callable[[], datetime] = now,
        redact: Redactor | None = None,
        claims_kept: timedelta | None = None,
        approval: ApprovalConfig | None = None,
    ) -> None:
        self.bus = bus
        self.grounds = SessionGrounds(bus.store, approval or ApprovalConfig())
        """What a call's approval is checked against (the deployment's default mode and
        allowlist: the settings' `approval_config`)."""
        self.runs_until = claims_kept / 2 if claims_kept else None
        """How old a request may be and still run: its claim is surely still kept (the
        bucket's TTL, `claims_kept`, halved for the clocks' disagreement; None: claims are
        kept for ever, any request runs)."""
        self.registry = registry
        self.workspace = workspace.resolve()
        self.budget = budget
        self.clock = clock
        self.redact = redact or Redactor()
        self.source = source_name("tool-executor")
        self.slots = asyncio.Semaphore(concurrency)
        self.running: dict[str, tuple[asyncio.Task[None], ToolInvocationRequested]] = {}
        self.aborted: set[str] = set()
        """Invocations cancelled because their turn was hard-aborted (not a shutdown)."""
        self.requests: set[asyncio.Future[None]] = set()
        """Every request being handled (claiming, running, appending or acking), and the
        appends of `Started` that go on beside them."""
        self.kv: Any = None
        self.blobs: Any = None
        self.claims = KvWrites(bus.store.appender, bus.subjects.invocations_bucket)

    async def serve(self, stop: asyncio.Event) -> None:
        subjects = self.bus.subjects
        self.workspace.mkdir(parents=True, exist_ok=True)
        bucket = subjects.invocations_bucket
        self.kv = await stoppable(retried(f"bucket {bucket}", self._claims_kv), stop)
        if self.kv is None:
            return  # stopped before NATS answered
        self.blobs = await self._object_store()
        aborts = await self.bus.nc.subscribe(
            subjects.log_kind_live("TurnEnded"), cb=self._on_turn_end
        )
        log.info("tool-executor running %s in %s", self.registry.names(), self.workspace)
        try:
            async with asyncio.TaskGroup() as tasks:

                async def on_msg(msg: Any) -> None:
                    event = decode(msg.data)
                    if isinstance(event, ToolInvocationRequested):
                        task = tasks.create_task(self.run_one(msg, event))
                        self.requests.add(task)
                        task.add_done_callback(self.requests.discard)
                    else:
                        await msg.ack()

                bound = log_push(self.bus.js, subjects, TOOL_EXECUTOR, on_msg)
                sub = await stoppable(bound, stop)  # NATS slow: asked again until it answers
                await stop.wait()
                if sub is not None:
                    await sub.unsubscribe()
                for task, _ in list(self.running.values()):
                    task.cancel()
                await self._wind_down()
        finally:
            await aborts.unsubscribe()

    async def _wind_down(self) -> None:
        """Give the requests still in hand `SHUTDOWN_GRACE_S` to finish (a result waiting
        for the broker to come back), then cancel them: a shutdown is bounded even while
        the broker is away."""
        pending = {task for task in self.requests if not task.done()}
        if not pending:
            return
        _, late = await asyncio.wait(pending, timeout=SHUTDOWN_GRACE_S)
        for task in late:
            task.cancel()
        if late:
            log.warning("shutdown: gave up %d request(s) still appending or acking", len(late))

    async def run_one(self, msg: Any, request: ToolInvocationRequested) -> None:
        """One request; a failure here (the broker away while claiming, say) leaves the
        request unacked to come again, and never ends the executor."""
        try:
            await self._run_one(msg, request)
        except asyncio.CancelledError:
            raise
        except LogFull:  # its claim refused for storage (the alarm said so once): not run
            await _nak(msg, backoff_s(int(msg.metadata.num_delivered)))
        except Exception:
            log.exception("invocation %s: left for redelivery", request.data.invocation_id)

    async def _run_one(self, msg: Any, request: ToolInvocationRequested) -> None:
        invocation_id = request.data.invocation_id
        if invocation_id in self.running:
            await msg.ack()  # a redelivery of what this executor is running right now
            return
        async with self.slots:
            if not await self._justified(request):
                await msg.ack()
                return
            facts = await self._claim(request)
            if facts is None:
                await msg.ack()
                return
            task = asyncio.current_task()
            assert task is not None
            self.running[invocation_id] = (task, request)
            beating = InProgress([msg], ACK_WAIT_S)
            try:
                with telemetry.tool_span(request, msg):
                    await self._run(facts)
            except asyncio.CancelledError:
                if invocation_id not in self.aborted:
                    raise  # shutting down: the claim stays `running` for the next executor
                self.aborted.discard(invocation_id)
                await self._append(facts.cancelled("the turn was hard-aborted", self.clock()))
                await self._done(invocation_id)
                await _ack(msg)
                return
            finally:
                beating.stop()
                self.running.pop(invocation_id, None)
            await self._done(invocation_id)
            await _ack(msg)

    async def _justified(self, request: ToolInvocationRequested) -> bool:
        """Whether the log justifies running the call (`core.justification`). One that it
        does not is failed `policy_denied` and never run, unless it was claimed before (it
        was justified then: a redelivery after its facts changed, `_claim` handles it)."""
        verdict = await self.grounds.check(request)
        if isinstance(verdict, Justified):
            return True
        invocation_id = request.data.invocation_id
        if await self._claimed(invocation_id):
            return True
        log.warning(
            "invocation %s of session %s not run: %s",
            invocation_id,
            request.session_id,
            verdict.reason,
        )
        facts = Facts(request, self.source)
        await self._append(
            facts.failed(
                FailureClass.POLICY_DENIED,
                "approval_not_justified",
                f"{verdict.reason}; the tool-executor did not run it",
                self.clock(),
            )
        )
        return False

    async def _claimed(self, invocation_id: str) -> bool:
        try:
            entry = await self.kv.get(invocation_id)
        except KeyNotFoundError:
            return False
        return entry.value is not None  # an expired key reads as None (DESIGN §10)

    async def _claim(self, request: ToolInvocationRequested) -> Facts | None:
        """Facts for this attempt, or None when there is nothing (more) to do."""
        invocation_id = request.data.invocation_id
        if self.runs_until is not None and self.clock() - request.time > self.runs_until:
            await self._expire(request)
            return None
        if await self.claims.create(invocation_id, RUNNING):
            return Facts(request, self.source)
        entry = await self.kv.get(invocation_id)
        if entry.value == DONE:
            return None
        if await self._has_result(request):  # appended; died before the claim was marked
            await self._done(invocation_id)
            return None
        facts = Facts(request, self.source, attempt=2)
        if request.data.idempotent:
            log.warning("invocation %s was interrupted; running it again", invocation_id)
            return facts
        await self._append(
            facts.failed(
                FailureClass.TOOL_RUNTIME_ERROR,
                "interrupted",
                "an executor stopped while running this call; it may have had effects, so "
                "it is not run again",
                self.clock(),
                may_have_run=True,
            )
        )
        await self._done(invocation_id)
        return None

    async def _expire(self, request: ToolInvocationRequested) -> None:
        """A request older than its claim surely lives: whether it ran cannot be told, so it
        is not run (again); failed `expired, mayHaveRun`, unless its result is in the log."""
        if await self._has_result(request):
            return
        log.warning("invocation %s is too old to run; failing it", request.data.invocation_id)
        facts = Facts(request, self.source)
        await self._append(
            facts.failed(
                FailureClass.TOOL_RUNTIME_ERROR,
                "expired",
                f"the request is older than {self.runs_until} (its at-most-once claim may be "
                "gone), so it is not run; raise TURNSTREAM_INVOCATION_MAX_AGE_DAYS to keep "
                "claims longer",
                self.clock(),
                may_have_run=True,
            )
        )

    async def _has_result(self, request: ToolInvocationRequested) -> bool:
        """Whether the log holds a result of the request's invocation."""
        wanted, found = request.data.invocation_id, False

        def on_event(_seq: int, _subject: str, data: bytes) -> None:
            nonlocal found
            found = found or orjson.loads(data)["data"].get("invocationId") == wanted

        subjects = self.bus.subjects
        stream = subjects.log_stream_of(request.session_id)
        for kind in RESULTS:
            subject = subjects.log(request.session_id, kind)
            await scan_log(self.bus.js, subjects, on_event, subject=subject, stream=stream)
        return found

    async def _run(self, facts: Facts) -> None:
        data = facts.request.data
        tool = self.registry.get(data.tool)
        if tool is None:
            detail = f"no tool named {data.tool!r} here; known: {', '.join(self.registry.names())}"
            fail = facts.failed(
                FailureClass.TOOL_RUNTIME_ERROR, "unknown_tool", detail, self.clock()
            )
            await self._append(fail)
            return
        errors = self.registry.validate_args(data.tool, data.args)
        if errors:
            detail = "; ".join(errors)
            fail = facts.failed(
                FailureClass.TOOL_RUNTIME_ERROR, "invalid_arguments", detail, self.clock()
            )
            await self._append(fail)
            return
        # Started is published while the tool runs (its ack is awaited with the result's):
        # the claim, not this event, is what keeps the call at most once. A read-only
        # tool's waits `START_GRACE_S`, to go with a quick result in one batch.
        starting = Started(facts.started(self.clock()), self._append, self._append_all)
        if data.read_only:
            starting.later(START_GRACE_S, self.requests)
        else:
            starting.now(self.requests)
        timeout = data.timeout_ms / 1000
        session = facts.request.session_id
        ctx = ToolContext(
            self.workspace,
            session,
            data.invocation_id,
            partial(session_attachment, self.bus, session),
        )
        start = time.perf_counter()

        def took() -> float:
            return (time.perf_counter() - start) * 1000

        event: ToolInvocationFailed | ToolInvocationSucceeded
        try:
            async with asyncio.timeout(timeout):
                output = await tool.run(dict(data.args), ctx)
        except asyncio.CancelledError:  # a hard abort or a shutdown: Started still goes first
            await starting.alone()
            raise
        except ToolError as exc:
            event = facts.failed(
                FailureClass.TOOL_RUNTIME_ERROR,
                exc.kind,
                exc.detail,
                self.clock(),
                may_have_run=not data.read_only,
                duration_ms=took(),
            )
        except TimeoutError:
            event = facts.failed(
                FailureClass.TIMEOUT,
                "timeout",
                f"{data.tool} did not finish within {timeout:g} s",
                self.clock(),
                may_have_run=not data.read_only,
                duration_ms=took(),
            )
        except Exception as exc:
            log.exception("tool %s crashed", data.tool)
            event = facts.failed(
                FailureClass.TOOL_RUNTIME_ERROR,
                "crashed",
                f"{type(exc).__name__}: {exc}",
                self.clock(),
                may_have_run=not data.read_only,
                duration_ms=took(),
            )
        else:
            output = self.redact(output)
            blob = None
            kept: str | None = None
            if needs_blob(output, self.budget):
                blob = facts.blob_name
                kept = await self._keep_blob(blob, output)
            if kept is not None:
                event = facts.failed(
                    FailureClass.TOOL_RUNTIME_ERROR,
                    "result_not_stored",
                    f"the result ({len(output)} characters) is over the budget of "
                    f"{self.budget} and could not be kept in the object store "
                    f"{self.bus.subjects.blobs_bucket!r}: {kept}",
                    self.clock(),
                    may_have_run=not data.read_only,
                    duration_ms=took(),
                )
            else:
                event = facts.succeeded(output, self.budget, self.clock(), took(), blob)
        if isinstance(event.data, ToolInvocationFailedData):  # a tool's error may quote a secret
            error = event.data.error.model_copy(
                update={"detail": self.redact(event.data.error.detail)}
            )
            event = event.model_copy(
                update={"data": event.data.model_copy(update={"error": error})}
            )
        await starting.with_result(event)

    async def _claims_kv(self) -> Any:
        return await self.bus.js.key_value(self.bus.subjects.invocations_bucket)

    async def _object_store(self) -> Any:
        """The blobs bucket, or None when it is missing or not permitted (a result over the
        budget then fails with a reason; everything else goes on)."""
        try:
            return await self.bus.js.object_store(self.bus.subjects.blobs_bucket)
        except Exception as exc:
            log.warning("object store %s unavailable: %s", self.bus.subjects.blobs_bucket, exc)
            return None

    async def _keep_blob(self, name: str, output: str) -> str | None:
        """Put a full result in the object store; None when kept, else why not.

        An object is never replaced: the store would purge the old one's chunks, a right
        no service has (ops/accounts.conf). A name already kept is this attempt's, put
        before a redelivery; an idempotent call's rerun keeps that result."""
        if self.blobs is None:
            self.blobs = await self._object_store()
        if self.blobs is None:
            return "the bucket is missing or not permitted"
        try:
            async with asyncio.timeout(BLOB_TIMEOUT_S):
                try:
                    await self.blobs.get_info(name)
                    return None
                except ObjectNotFoundError:
                    await self.blobs.put(name, output.encode())
        except Exception as exc:
            log.warning("cannot keep result %s in the object store: %r", name, exc)
            self.blobs = None  # looked up again next time (it may have been deleted)
            return f"{type(exc).__name__}: {exc}"
        return None

    async def _append(self, event: Any) -> None:
        """Append a fact, retried until the broker takes it: the tool has run, and losing
        its result would turn a success into `interrupted, mayHaveRun` (the event id
        dedups a retry that was stored after all)."""
        await _until_done(f"append of {event.type}", lambda: self.bus.store.append_facts([event]))

    async def _append_all(self, events: list[Any]) -> None:
        """`_append` for several facts, in order, in one batch."""
        what = f"append of {', '.join(e.type for e in events)}"
        await _until_done(what, lambda: self.bus.store.append_facts(events))

    async def _done(self, invocation_id: str) -> None:
        """Mark the claim done, retried like an append."""
        await _until_done(
            f"claim {invocation_id}: put done", lambda: self.claims.put(invocation_id, DONE)
        )

    async def _on_turn_end(self, msg: Any) -> None:
        """A hard abort ends its turn `failed, interrupted`: cancel what that turn runs."""
        if not self.running:
            return  # every turn's end comes here: most find nothing to cancel
        event = decode(msg.data)
        if not isinstance(event, TurnEnded) or event.data.failure_class != "interrupted":
            return
        for task, request in list(self.running.values()):
            if request.turn_id == event.turn_id:
                self.aborted.add(request.data.invocation_id)
                task.cancel()


async def _until_done(what: str, attempt: Callable[[], Awaitable[Any]]) -> None:
    """`attempt()` again, backing off up to `RETRY_MAX_S`, until it succeeds."""
    delay, refusals = 0.5, 0
    while True:
        try:
            await attempt()
            return
        except asyncio.CancelledError:
            raise
        except LogFull:
            # the store is full (the alarm logged it once): the result waits in memory,
            # backing off further, until space is freed
            refusals += 1
            await asyncio.sleep(backoff_s(refusals))
        except Exception as exc:
            log.warning("%s failed (%r); retrying in %.1f s", what, exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_S)


async def _nak(msg: Any, delay: float) -> None:
    """Have `msg` come again after `delay` (lost to an outage: after the ack wait)."""
    try:
        await msg.nak(delay=delay)
    except Exception as exc:
        log.warning("nak failed: %s", exc)


async def _ack(msg: Any) -> None:
    """An ack lost to an outage only means a redelivery, which finds the claim done."""
    try:
        await msg.ack()
    except Exception as exc:
        log.warning("ack failed: %s", exc)


async def serve(
    settings: Settings,
    stop: asyncio.Event,
    bus: Bus | None = None,
    *,
    tools: ToolRegistry | None = None,
) -> None:
    async with (
        service_bus(settings, "tool-executor", bus) as bus,
        McpTools(settings.mcp.servers, settings.secret) as mcp,
    ):
        base = tools or ToolRegistry.load()
        executor = Executor(
            bus,
            mcp.registry(base),
            settings.workspace,
            budget=settings.tool_result_budget,
            concurrency=settings.tool_concurrency,
            redact=Redactor(settings.secret_values()),
            claims_kept=timedelta(days=settings.invocation_max_age_days) or None,
            approval=settings.approval_config(),
        )
        # the manifest the runners watch; NATS slow: asked again until it answers
        await stoppable(keep_published(bus, mcp, base, executor), stop)
        await executor.serve(stop)


def main() -> None:
    run_service("tool-executor", serve)
