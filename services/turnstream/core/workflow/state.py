"""A workflow run as the decider sees it: a fold over the session's workflow events.

Each stage execution keeps its turn in a lane: a `ChatState` of its own whose history is
the stage-local transcript (never part of the session's history) and whose active turn
has the stage execution id as its `turnId`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from turnstream.core.events import StageResult, WorkflowAttached
from turnstream.core.turn.state import Act, ChatState
from turnstream.core.workflow.definition import Step, WorkflowDef

StageStatus = Literal["gate", "act", "exited", "cancelled", "init_failed"]
RunStatus = Literal["attached", "running", "completed", "failed", "cancelled"]
OPEN_RUN: frozenset[str] = frozenset({"attached", "running"})


@dataclass(frozen=True)
class StageRun:
    stage_id: str
    execution_id: str
    step: int
    lane: ChatState
    system: str
    entered_at: datetime
    role: Literal["stage", "join", "recover"] = "stage"
    status: StageStatus = "gate"
    attempt: int = 1
    gate_checks: int = 0
    wait_until: datetime | None = None
    """A deferred gate or a retry's backoff: nothing happens before then."""
    act: Act = field(default_factory=Act)
    """Where its Act stands (its turn sees it in its `StageSpec`)."""
    parsed: dict[str, Any] | None = None
    cap_hit: bool = False
    failure: str | None = None
    """Why the stage turn ended on its own (a provider error, a bound)."""
    asserted: Literal["ok", "fail"] | None = None
    """Assert's final verdict, once recorded (Exit follows from it)."""
    assert_reason: str | None = None
    result: StageResult | None = None
    exited_at: datetime | None = None

    @property
    def running(self) -> bool:
        return self.status in ("gate", "act")

    @property
    def succeeded(self) -> bool:
        return self.result is not None and self.result.verdict in ("ok", "skip")


@dataclass(frozen=True)
class WorkflowRun:
    run_id: str
    name: str
    definition: WorkflowDef
    ctx: dict[str, Any]
    chat_id: str
    trace_id: str
    correlation_id: str
    last_event_id: str
    status: RunStatus = "attached"
    step: int = -1
    executions: tuple[StageRun, ...] = ()
    results: dict[str, StageResult] = field(default_factory=dict)
    interrupt: Literal["graceful", "hard"] | None = None
    reason: str | None = None
    queued: tuple[WorkflowAttached, ...] = ()
    """Runs attached while this one goes on: each starts when the one before exits."""

    @property
    def open(self) -> bool:
        return self.status in OPEN_RUN

    def lane_of(self, turn_id: str | None) -> StageRun | None:
        for ex in self.executions:
            if ex.execution_id == turn_id:
                return ex
        return None

    def current(self) -> list[StageRun]:
        return [ex for ex in self.executions if ex.step == self.step]

    def step_def(self) -> Step:
        return self.definition.steps[self.step]
