"""tool-executor shell: claim, validate, run with a timeout, append the result, ack.

Only a call the log justifies runs: the turn-runner may append `ToolCallApproved` (it
applies the approval rules itself), so before claiming a call the executor re-derives its
approval from facts the runner cannot append (`core.justification`, `grounds.py`): the
session's security mode (its agent profile's, else this executor's default) or allowlist,
an attached workflow's stage tools, or a person's approval of this very call. One that is
not justified is failed `policy_denied` (`approval_not_justified`) and never run (the
check and the claim's create go at once: its claim is then marked done).

At most once per invocation id: the claim `invocation.<id>` is created in the KV bucket
before the tool runs (`claims.py`: a redelivery, a claim left `running` by an executor that
died, a request older than its claim surely lives). Claims are kept
`TURNSTREAM_INVOCATION_MAX_AGE_DAYS` (the bucket's TTL). Running the call and the fact it
ends in are `running.py`'s; when its `Started` goes and the retried writes, `writes.py`'s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from turnstream.bus import Bus
from turnstream.bus.appender import LogFull
from turnstream.bus.consume import InProgress
from turnstream.bus.durables import TOOL_EXECUTOR
from turnstream.bus.full import backoff_s
from turnstream.bus.retry import retried, stoppable
from turnstream.core.approval import ApprovalConfig
from turnstream.core.events import FailureClass, ToolInvocationRequested, TurnEnded, decode
from turnstream.core.justification import Justified
from turnstream.runtime import now, run_service, service_bus, source_name, telemetry
from turnstream.runtime.manifest import keep_published
from turnstream.runtime.redaction import Redactor
from turnstream.settings import Settings
from turnstream.tool_executor.attachments import session_attachment
from turnstream.tool_executor.claims import Claims
from turnstream.tool_executor.grounds import SessionGrounds
from turnstream.tool_executor.outcome import Facts
from turnstream.tool_executor.running import ResultBlobs, ToolRun, refused
from turnstream.tool_executor.writes import Started, until_done
from turnstream.tools import ToolContext, ToolRegistry
from turnstream.tools.mcp import McpTools

log = logging.getLogger("turnstream.tool_executor")
DURABLE = TOOL_EXECUTOR.name
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
        self.registry = registry
        self.workspace = workspace.resolve()
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
        runs_until = claims_kept / 2 if claims_kept else None
        self.claims = Claims(bus, self.source, clock, self._append, runs_until)
        self.tool_run = ToolRun(clock, self.redact, budget, ResultBlobs(bus))

    async def serve(self, stop: asyncio.Event) -> None:
        subjects = self.bus.subjects
        self.workspace.mkdir(parents=True, exist_ok=True)
        bucket = subjects.invocations_bucket
        kv = await stoppable(retried(f"bucket {bucket}", self.claims.open), stop)
        if kv is None:
            return  # stopped before NATS answered
        await self.tool_run.blobs.open()
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

                bound = self.bus.log_push(TOOL_EXECUTOR, on_msg)
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
            facts = await self._claim_if_justified(request)
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
                await self.claims.done(invocation_id)
                await _ack(msg)
                return
            finally:
                beating.stop()
                self.running.pop(invocation_id, None)
            await self.claims.done(invocation_id)
            await _ack(msg)

    async def _claim_if_justified(self, request: ToolInvocationRequested) -> Facts | None:
        """Facts to run the call with, once claimed, if the log justifies it
        (`core.justification`); None: nothing to run. The check and the claim's create
        are asked at once (one round trip, not two, before a call runs). A call claimed
        now that is not justified is failed `policy_denied` and its claim marked done; one
        claimed before was justified then (a redelivery after its facts changed):
        `Claims.existing` decides it."""
        if self.claims.expired(request):
            verdict = await self.grounds.check(request)
            if not isinstance(verdict, Justified) and not await self.claims.claimed(
                request.data.invocation_id
            ):
                await self._deny(request, verdict.reason)
                return None
            return await self.claims.claim(request)
        verdict, created = await asyncio.gather(
            self.grounds.check(request), self.claims.create(request)
        )
        if not created:
            return await self.claims.existing(request)
        if not isinstance(verdict, Justified):
            await self._deny(request, verdict.reason)
            await self.claims.done(request.data.invocation_id)
            return None
        return Facts(request, self.source)

    async def _deny(self, request: ToolInvocationRequested, reason: str) -> None:
        """Fail a call the log does not justify: `policy_denied`, never run."""
        log.warning(
            "invocation %s of session %s not run: %s",
            request.data.invocation_id,
            request.session_id,
            reason,
        )
        facts = Facts(request, self.source)
        await self._append(
            facts.failed(
                FailureClass.POLICY_DENIED,
                "approval_not_justified",
                f"{reason}; the tool-executor did not run it",
                self.clock(),
            )
        )

    async def _run(self, facts: Facts) -> None:
        data = facts.request.data
        refusal = refused(self.registry, facts, self.clock())
        if refusal is not None:
            await self._append(refusal)
            return
        tool = self.registry.get(data.tool)
        assert tool is not None  # `refused` says so otherwise
        # Started is published while the tool runs (its ack is awaited with the result's):
        # the claim, not this event, is what keeps the call at most once. A read-only
        # tool's waits `START_GRACE_S`, to go with a quick result in one batch.
        starting = Started(facts.started(self.clock()), self._append, self._append_all)
        if data.read_only:
            starting.later(START_GRACE_S, self.requests)
        else:
            starting.now(self.requests)
        session = facts.request.session_id
        attachment = partial(session_attachment, self.bus, session)
        ctx = ToolContext(self.workspace, session, data.invocation_id, attachment)
        try:
            event = await self.tool_run.ended(tool, facts, ctx)
        except asyncio.CancelledError:  # a hard abort or a shutdown: Started still goes first
            await starting.alone()
            raise
        await starting.with_result(event)

    async def _append(self, event: Any) -> None:
        """Append a fact, retried until the broker takes it: the tool has run, and losing
        its result would turn a success into `interrupted, mayHaveRun` (the event id
        dedups a retry that was stored after all)."""
        await until_done(f"append of {event.type}", lambda: self.bus.store.append_facts([event]))

    async def _append_all(self, events: list[Any]) -> None:
        """`_append` for several facts, in order, in one batch."""
        what = f"append of {', '.join(e.type for e in events)}"
        await until_done(what, lambda: self.bus.store.append_facts(events))

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
