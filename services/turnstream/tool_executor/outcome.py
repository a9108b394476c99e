"""Pure pieces of running a tool: result events, truncation to the budget."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from turnstream.core.events import (
    Envelope,
    EventBase,
    FailureClass,
    ToolError,
    ToolInvocationCancelled,
    ToolInvocationCancelledData,
    ToolInvocationFailed,
    ToolInvocationFailedData,
    ToolInvocationRequested,
    ToolInvocationStarted,
    ToolInvocationStartedData,
    ToolInvocationSucceeded,
    ToolInvocationSucceededData,
    stamp,
)
from turnstream.core.ids import derived_id


@dataclass(frozen=True)
class Facts:
    """Builds the facts about one requested invocation. Ids derive from the invocation and
    the attempt, so a redelivered request that gets as far again writes the same events."""

    request: ToolInvocationRequested
    source: str
    attempt: int = 1

    def _make(self, cls: type[EventBase], purpose: str, data: Any, now: datetime) -> Any:
        req = self.request
        return stamp(
            cls,
            data,
            Envelope.of(req),
            event_id=derived_id(f"{req.data.invocation_id}:{self.attempt}", purpose, req.time),
            time=now,
            source=self.source,
            causation_id=req.id,
        )

    @property
    def invocation_id(self) -> str:
        return self.request.data.invocation_id

    @property
    def blob_name(self) -> str:
        """Where this attempt keeps a full result in the object store (the event names it):
        a rerun of an idempotent call does not replace the first attempt's."""
        if self.attempt == 1:
            return self.invocation_id
        return f"{self.invocation_id}.{self.attempt}"

    def started(self, now: datetime) -> ToolInvocationStarted:
        data = ToolInvocationStartedData(invocation_id=self.invocation_id, attempt=self.attempt)
        return self._make(ToolInvocationStarted, "started", data, now)  # type: ignore[no-any-return]

    def succeeded(
        self, output: str, budget: int, now: datetime, duration_ms: float, blob: str | None
    ) -> ToolInvocationSucceeded:
        shown, truncated = truncate(output, budget, blob)
        data = ToolInvocationSucceededData(
            invocation_id=self.invocation_id,
            output=shown,
            truncated=truncated,
            size=len(output.encode()),
            blob=blob if truncated else None,
            duration_ms=duration_ms,
        )
        return self._make(ToolInvocationSucceeded, "result", data, now)  # type: ignore[no-any-return]

    def failed(
        self,
        failure: FailureClass,
        kind: str,
        detail: str,
        now: datetime,
        *,
        may_have_run: bool = False,
        duration_ms: float = 0.0,
    ) -> ToolInvocationFailed:
        error = ToolError(error_class=failure, kind=kind, detail=detail)
        data = ToolInvocationFailedData(
            invocation_id=self.invocation_id,
            error=error,
            may_have_run=may_have_run,
            duration_ms=duration_ms,
        )
        return self._make(ToolInvocationFailed, "result", data, now)  # type: ignore[no-any-return]

    def cancelled(self, reason: str, now: datetime) -> ToolInvocationCancelled:
        data = ToolInvocationCancelledData(invocation_id=self.invocation_id, reason=reason)
        return self._make(ToolInvocationCancelled, "result", data, now)  # type: ignore[no-any-return]


def needs_blob(output: str, budget: int) -> bool:
    return len(output) > budget


def truncate(output: str, budget: int, blob: str | None) -> tuple[str, bool]:
    """The result as the model sees it: whole, or its head and a note where the rest is."""
    if len(output) <= budget:
        return output, False
    where = f" (full result kept as object {blob!r})" if blob else ""
    note = f"\n[truncated: showing {budget} of {len(output)} characters{where}]"
    return output[:budget] + note, True
