"""One tool run: the call checked (a known tool, valid arguments), run within its timeout,
and the fact it ends in (`ToolInvocationSucceeded`, `ToolInvocationFailed`), redacted, its
full output kept in the object store when it is over the budget."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from turnstream.bus import Bus
from turnstream.bus.errors import ObjectMissing
from turnstream.core.events import (
    FailureClass,
    ToolInvocationFailed,
    ToolInvocationFailedData,
    ToolInvocationSucceeded,
)
from turnstream.runtime.redaction import Redactor
from turnstream.tool_executor.outcome import Facts, needs_blob
from turnstream.tools import Tool, ToolContext, ToolError, ToolRegistry

log = logging.getLogger("turnstream.tool_executor")
BLOB_TIMEOUT_S = 30.0
Ended = ToolInvocationFailed | ToolInvocationSucceeded


def refused(registry: ToolRegistry, facts: Facts, now: datetime) -> ToolInvocationFailed | None:
    """Why the call is not run here (no such tool, arguments its schema refuses), or None."""
    data = facts.request.data
    if registry.get(data.tool) is None:
        detail = f"no tool named {data.tool!r} here; known: {', '.join(registry.names())}"
        return facts.failed(FailureClass.TOOL_RUNTIME_ERROR, "unknown_tool", detail, now)
    errors = registry.validate_args(data.tool, data.args)
    if errors:
        detail = "; ".join(errors)
        return facts.failed(FailureClass.TOOL_RUNTIME_ERROR, "invalid_arguments", detail, now)
    return None


@dataclass
class ToolRun:
    """What running a call needs besides the call: the clock, the redactor, the result
    budget and where a result over it is kept."""

    clock: Callable[[], datetime]
    redact: Redactor
    budget: int
    blobs: ResultBlobs

    async def ended(self, tool: Tool, facts: Facts, ctx: ToolContext) -> Ended:
        """Run the tool within its timeout; the fact it ends in, redacted. A cancellation
        (a hard abort, a shutdown) goes through."""
        data = facts.request.data
        timeout = data.timeout_ms / 1000
        start = time.perf_counter()

        def failed(failure: FailureClass, kind: str, detail: str) -> ToolInvocationFailed:
            took = (time.perf_counter() - start) * 1000
            may_have_run = not data.read_only
            return facts.failed(
                failure, kind, detail, self.clock(), may_have_run=may_have_run, duration_ms=took
            )

        event: Ended
        try:
            async with asyncio.timeout(timeout):
                output = await tool.run(dict(data.args), ctx)
        except ToolError as exc:
            event = failed(FailureClass.TOOL_RUNTIME_ERROR, exc.kind, exc.detail)
        except TimeoutError:
            detail = f"{data.tool} did not finish within {timeout:g} s"
            event = failed(FailureClass.TIMEOUT, "timeout", detail)
        except Exception as exc:
            log.exception("tool %s crashed", data.tool)
            event = failed(
                FailureClass.TOOL_RUNTIME_ERROR, "crashed", f"{type(exc).__name__}: {exc}"
            )
        else:
            output = self.redact(output)
            blob = facts.blob_name if needs_blob(output, self.budget) else None
            why = None if blob is None else await self.blobs.keep(blob, output)
            if why is None:
                took = (time.perf_counter() - start) * 1000
                event = facts.succeeded(output, self.budget, self.clock(), took, blob)
            else:
                event = failed(
                    FailureClass.TOOL_RUNTIME_ERROR,
                    "result_not_stored",
                    f"the result ({len(output)} characters) is over the budget of "
                    f"{self.budget} and could not be kept in the object store "
                    f"{self.blobs.bucket!r}: {why}",
                )
        return self._redacted(event)

    def _redacted(self, event: Ended) -> Ended:
        """A failure's detail redacted: a tool's error may quote a secret."""
        if not isinstance(event.data, ToolInvocationFailedData):
            return event
        error = event.data.error.model_copy(update={"detail": self.redact(event.data.error.detail)})
        return event.model_copy(update={"data": event.data.model_copy(update={"error": error})})


class ResultBlobs:
    """Full results over the budget, kept in the blobs bucket."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.bucket = bus.subjects.blobs_bucket
        self.store: Any = None

    async def open(self) -> Any:
        """The blobs bucket, or None when it is missing or not permitted (a result over the
        budget then fails with a reason; everything else goes on)."""
        try:
            self.store = await self.bus.object_store(self.bucket)
        except Exception as exc:
            log.warning("object store %s unavailable: %s", self.bucket, exc)
            self.store = None
        return self.store

    async def keep(self, name: str, output: str) -> str | None:
        """Put a full result in the object store; None when kept, else why not.

        An object is never replaced: the store would purge the old one's chunks, a right
        no service has (ops/accounts.conf). A name already kept is this attempt's, put
        before a redelivery; an idempotent call's rerun keeps that result."""
        if self.store is None and await self.open() is None:
            return "the bucket is missing or not permitted"
        try:
            async with asyncio.timeout(BLOB_TIMEOUT_S):
                try:
                    await self.store.get_info(name)
                    return None
                except ObjectMissing:
                    await self.store.put(name, output.encode())
        except Exception as exc:
            log.warning("cannot keep result %s in the object store: %r", name, exc)
            self.store = None  # looked up again next time (it may have been deleted)
            return f"{type(exc).__name__}: {exc}"
        return None
