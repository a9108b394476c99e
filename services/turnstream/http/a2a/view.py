"""One A2A task (= one turn) folded from its session's log (pure: no I/O).

```
InputAccepted ──► submitted ──turn starts──► working ──TurnEnded{completed}──► completed
InputRejected ──► rejected      │   ▲                 ──TurnEnded{failed}────► failed
                                │   │ InteractionAnswered   (failed, interrupted: canceled)
                InteractionRequested                  ──TurnEnded{denied}────► rejected
                                ▼   │
                           input-required
```

The view is what the A2A task store keeps (`to_dict`): a replica that reads it carries on
folding from `last_seq`, so no replica keeps a task in memory and none re-reads the turn.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from turnstream.core.events import (
    Event,
    InputAccepted,
    InputRejected,
    InteractionAnswered,
    InteractionRequested,
    SteeringInjected,
    TurnEnded,
)

State = Literal[
    "submitted", "working", "input-required", "completed", "failed", "canceled", "rejected"
]
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "canceled", "rejected"})
PAUSED: frozenset[str] = TERMINAL | {"input-required"}
"""States where a `SendMessage` stops waiting and a stream ends (the A2A "interrupted"
and terminal states)."""
ACTED_ON = frozenset(
    {
        "InputAccepted",
        "InputRejected",
        "InteractionRequested",
        "InteractionAnswered",
        "SteeringInjected",
        "TurnEnded",
        "SessionTurnStart",
        "StagePreFired",
    }
)
"""The only kinds `TurnView.feed` reads: a shell may skip decoding the rest."""


@dataclass
class TurnView:
    """The task of turn `turn_id` in session `session_id`, as of log sequence `last_seq`."""

    turn_id: str
    session_id: str
    state: State = "submitted"
    last_seq: int = 0
    input_ids: list[str] = field(default_factory=list)
    """Ids of the inputs (InputAccepted) that belong to this turn (its own, steered ones)."""
    interaction: dict[str, Any] | None = None
    """The open prompt: `interactionId`, `tool`, `args`, `prompt`."""
    reply: str | None = None
    reason: str | None = None
    failure_class: str | None = None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    def feed(self, seq: int, event: Event) -> bool:
        """Fold one event of the session (any turn's; others are skipped). True when the
        task's state or prompt changed."""
        if seq <= self.last_seq:
            return False
        self.last_seq = seq
        before = (self.state, self.interaction)
        mine = event.turn_id == self.turn_id
        match event:
            case InputAccepted() if mine:
                self.input_ids.append(event.id)
            case InputRejected() if mine:
                self.state = "rejected"
                self.reason = event.data.reason
                self.failure_class = "invalid_input"
            case SteeringInjected() if event.data.input_id in self.input_ids:
                pass  # steered into another turn: that turn's end is this one's (rare)
            case InteractionRequested() if mine and not self.terminal:
                asked = event.data
                self.state = "input-required"
                self.interaction = {
                    "interactionId": asked.interaction_id,
                    "tool": asked.tool,
                    "args": asked.args,
                    "prompt": asked.prompt,
                    "deadline": asked.deadline.isoformat(),
                }
            case InteractionAnswered() if (
                self.interaction is not None
                and event.data.interaction_id == self.interaction["interactionId"]
            ):
                self.interaction = None
                if not self.terminal:
                    self.state = "working"
            case TurnEnded() if mine:
                data = event.data
                self.interaction = None
                self.reply = data.reply
                self.reason = data.reason
                self.failure_class = data.failure_class.value if data.failure_class else None
                if data.status == "completed":
                    self.state = "completed"
                elif data.status == "denied":
                    self.state = "rejected"
                elif data.failure_class == "interrupted":
                    self.state = "canceled"
                else:
                    self.state = "failed"
            case _ if mine and self.state == "submitted" and event.type != "InputAccepted":
                self.state = "working"
            case _:
                pass
        return (self.state, self.interaction) != before

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TurnView:
        return cls(**data)

    def status_text(self) -> str:
        """What the task's status message says."""
        if self.state == "completed":
            return self.reply or ""
        if self.state == "input-required" and self.interaction is not None:
            i = self.interaction
            return (
                f"{i['prompt']}\nReply 'approve' or 'deny' (or a data part "
                f'{{"decision": "approve"}}) to answer prompt {i["interactionId"]}.'
            )
        if self.state in ("failed", "canceled", "rejected"):
            return f"{self.failure_class or self.state}: {self.reason or self.reply or ''}".strip()
        return self.state
