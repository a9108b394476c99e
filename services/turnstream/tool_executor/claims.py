"""At most once per invocation id: the claim `invocation.<id>` in the invocations bucket,
created before the tool runs (create fails if it exists), marked `done` once its result is
in the log.

A request redelivered after its result was appended finds the claim `done`. A claim still
`running` with no live task means an executor died mid-run: if the log has the
invocation's result (it died between that append and marking the claim done) the claim is
marked done; else an idempotent tool runs again, any other is failed with `interrupted,
mayHaveRun: true`. A request older than half the claims' TTL is not run, since its claim
may be gone: failed `expired, mayHaveRun`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import orjson

from turnstream.bus import Bus
from turnstream.bus.errors import KeyMissing
from turnstream.bus.kv import KvWrites
from turnstream.core.events import FailureClass, ToolInvocationRequested
from turnstream.tool_executor.outcome import Facts
from turnstream.tool_executor.writes import until_done

log = logging.getLogger("turnstream.tool_executor")
RUNNING, DONE = b"running", b"done"
RESULTS = ("ToolInvocationSucceeded", "ToolInvocationFailed", "ToolInvocationCancelled")
"""The facts that end an invocation: one in the log means the call needs nothing more."""


class Claims:
    """The executor's claims on invocations, and the facts they decide without a run."""

    def __init__(
        self,
        bus: Bus,
        source: str,
        clock: Callable[[], datetime],
        append: Callable[[Any], Awaitable[None]],
        runs_until: timedelta | None,
    ) -> None:
        self.bus, self.source, self.clock, self.append = bus, source, clock, append
        self.runs_until = runs_until
        """How old a request may be and still run: its claim is surely still kept (the
        bucket's TTL halved for the clocks' disagreement; None: claims are kept for ever,
        any request runs)."""
        self.writes = KvWrites(bus.store.appender, bus.subjects.invocations_bucket)
        self.kv: Any = None
        """The invocations bucket (`open`)."""

    async def open(self) -> Any:
        """The invocations bucket, as `kv`."""
        self.kv = await self.bus.key_value(self.bus.subjects.invocations_bucket)
        return self.kv

    async def claimed(self, invocation_id: str) -> bool:
        """Whether the invocation was claimed (and its claim still kept)."""
        try:
            entry = await self.kv.get(invocation_id)
        except KeyMissing:
            return False
        return entry.value is not None  # an expired key reads as None (DESIGN §10)

    async def claim(self, request: ToolInvocationRequested) -> Facts | None:
        """Facts for this attempt, or None when there is nothing (more) to do."""
        if self.expired(request):
            await self._expire(request)
            return None
        if await self.create(request):
            return Facts(request, self.source)
        return await self.existing(request)

    def expired(self, request: ToolInvocationRequested) -> bool:
        """Older than its claim surely lives: not run (`claim` fails it)."""
        return self.runs_until is not None and self.clock() - request.time > self.runs_until

    async def create(self, request: ToolInvocationRequested) -> bool:
        """Create the request's claim; False: it was claimed before (`existing`)."""
        return bool(await self.writes.create(request.data.invocation_id, RUNNING))

    async def existing(self, request: ToolInvocationRequested) -> Facts | None:
        """`claim` for a request claimed before: a redelivery, or an executor that died."""
        invocation_id = request.data.invocation_id
        entry = await self.kv.get(invocation_id)
        if entry.value == DONE:
            return None
        if await self._has_result(request):  # appended; died before the claim was marked
            await self.done(invocation_id)
            return None
        facts = Facts(request, self.source, attempt=2)
        if request.data.idempotent:
            log.warning("invocation %s was interrupted; running it again", invocation_id)
            return facts
        await self.append(
            facts.failed(
                FailureClass.TOOL_RUNTIME_ERROR,
                "interrupted",
                "an executor stopped while running this call; it may have had effects, so "
                "it is not run again",
                self.clock(),
                may_have_run=True,
            )
        )
        await self.done(invocation_id)
        return None

    async def done(self, invocation_id: str) -> None:
        """Mark the claim done, retried like an append."""
        await until_done(
            f"claim {invocation_id}: put done", lambda: self.writes.put(invocation_id, DONE)
        )

    async def _expire(self, request: ToolInvocationRequested) -> None:
        """A request older than its claim surely lives: whether it ran cannot be told, so it
        is not run (again); failed `expired, mayHaveRun`, unless its result is in the log."""
        if await self._has_result(request):
            return
        log.warning("invocation %s is too old to run; failing it", request.data.invocation_id)
        facts = Facts(request, self.source)
        await self.append(
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
            await self.bus.store.scan(on_event, subject=subject, stream=stream)
        return found
