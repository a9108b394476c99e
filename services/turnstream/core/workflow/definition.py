"""A workflow definition as loaded: stages (frontmatter + body) and the order they run in.

The definition travels inside `WorkflowAttached` (`to_dict` / `from_dict`), so a replay
rebuilds the run from the log alone, whatever happened to the files since.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

ResolutionPolicy = Literal["retry-later", "fail", "skip"]
RESOLUTION_POLICIES: tuple[str, ...] = ("retry-later", "fail", "skip")

GATE = "CheckGate"
"""The hook point of a stage's entry gate (`StageCheckGateResult`)."""
ASSERT = "Assert"
"""The hook point that judges a stage's completed Act (`StageAssertOutcome`)."""


def gate_outcome(verdict: str) -> Literal["pass", "defer", "block"]:
    """A gate hook's word as the gate's outcome (an asserter's words count too)."""
    if verdict in ("pass", "ok"):
        return "pass"
    return "block" if verdict in ("block", "fail") else "defer"


def assert_verdict(verdict: str) -> Literal["ok", "retry", "fail"]:
    """An assert hook's word as the assert's verdict (a gate's words count too)."""
    if verdict in ("ok", "pass"):
        return "ok"
    return "retry" if verdict in ("retry", "defer") else "fail"


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 1
    backoff_s: float = 0.0
    """Seconds before a retried Act starts; doubles per attempt when `exponential`."""
    exponential: bool = False

    def delay(self, attempt: int) -> float:
        """Backoff before attempt number `attempt` (2 = the first retry)."""
        if self.exponential:
            return float(self.backoff_s * 2 ** max(attempt - 2, 0))
        return self.backoff_s


@dataclass(frozen=True)
class StageDef:
    id: str
    name: str
    allowed_tools: tuple[str, ...]
    completion_tool: str
    completion_schema: dict[str, Any]
    retry_policy: RetryPolicy
    turn_cap: int
    resolution_policy: ResolutionPolicy
    body: str
    description: str | None = None
    inputs_schema: dict[str, Any] | None = None
    tags: tuple[str, ...] = ()
    file: str = ""
    budget: dict[str, float] | None = None
    """The stage's own budget limits (`turn_tokens`, `session_usd`, …): over the session's."""


@dataclass(frozen=True)
class Step:
    """One step of the order: a single stage, or a parallel group with an optional join."""

    stages: tuple[str, ...]
    join: str | None = None

    @property
    def parallel(self) -> bool:
        return len(self.stages) > 1 or self.join is not None


@dataclass(frozen=True)
class WorkflowDef:
    name: str
    steps: tuple[Step, ...]
    stages: dict[str, StageDef]
    on_fail: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> WorkflowDef:
        stages = {}
        for key, s in raw["stages"].items():
            stages[key] = StageDef(
                **{
                    **s,
                    "allowed_tools": tuple(s["allowed_tools"]),
                    "tags": tuple(s.get("tags", ())),
                    "retry_policy": RetryPolicy(**s["retry_policy"]),
                }
            )
        steps = tuple(Step(tuple(s["stages"]), s.get("join")) for s in raw["steps"])
        return cls(raw["name"], steps, stages, dict(raw.get("on_fail", {})))
