"""What became of one published command, folded from the log (pure: no I/O).

The gateway records its verdict on a command as one event that names the command's
inbound stream sequence (`data.inboundSeq`, exact even where the idempotency key is not
carried, as in a rejected `attach`): `InputAccepted` (message, steer),
`InterruptReceived`, `InteractionAnswered`, `WorkflowAttached`, or `InputRejected`. A
message's turn then ends with exactly one `TurnEnded`; a message steered into a running
turn (`SteeringInjected` naming its input) ends with that turn.

```
published ──accepted──► turn running ──TurnEnded──► ended
          │                 │ ▲
          │  InteractionRequested  ToolCallApproved / ToolCallDenied
          │                 ▼ │
          │           waiting on a person
          └─rejected──► (its own TurnEnded{failed, invalid_input})
```
"""

from __future__ import annotations

from dataclasses import dataclass

from turnstream.core.events import (
    Event,
    InputAccepted,
    InputRejected,
    InteractionAnswered,
    InteractionRequested,
    InterruptReceived,
    SteeringInjected,
    ToolCallApproved,
    ToolCallDenied,
    TurnEnded,
    WorkflowAttached,
)

ACCEPTED_TYPES = (InputAccepted, InterruptReceived, InteractionAnswered, WorkflowAttached)
FOLLOWED_TYPES = frozenset(
    cls.model_fields["type"].default
    for cls in (
        *ACCEPTED_TYPES,
        InputRejected,
        SteeringInjected,
        TurnEnded,
        InteractionRequested,
        ToolCallApproved,
        ToolCallDenied,
    )
)
"""The only kinds `Follow.feed` acts on: a shell may skip decoding the rest."""


@dataclass(frozen=True, slots=True)
class Seen:
    seq: int
    event: Event


@dataclass
class Follow:
    """Feed it the session's events in log order; it keeps what concerns the command
    stored at `inbound_seq` in the inbound stream."""

    inbound_seq: int
    accepted: Seen | None = None
    rejected: Seen | None = None
    ended: Seen | None = None
    turn_id: str | None = None
    """The turn the command's outcome belongs to (changes when a message is steered)."""
    waiting: Seen | None = None
    """The turn's open approval prompt (`InteractionRequested`): it waits on a person."""

    def feed(self, seq: int, event: Event) -> None:
        if self.decided is None:
            if isinstance(event, ACCEPTED_TYPES) and event.data.inbound_seq == self.inbound_seq:
                self.accepted = Seen(seq, event)
                self.turn_id = event.turn_id
            elif isinstance(event, InputRejected) and event.data.inbound_seq == self.inbound_seq:
                self.rejected = Seen(seq, event)
                self.turn_id = event.turn_id
            return
        accepted = self.accepted
        if (
            isinstance(event, SteeringInjected)
            and accepted is not None
            and event.data.input_id == accepted.event.id
        ):
            self.turn_id = event.turn_id
        elif not self.turn_id or event.turn_id != self.turn_id:
            return
        elif isinstance(event, InteractionRequested):
            self.waiting = Seen(seq, event)
        elif isinstance(event, ToolCallApproved | ToolCallDenied) and self.waiting is not None:
            prompt = self.waiting.event
            assert isinstance(prompt, InteractionRequested)
            if event.data.invocation_id == prompt.data.invocation_id:
                self.waiting = None
        elif isinstance(event, TurnEnded) and self.ended is None:
            self.ended = Seen(seq, event)

    @property
    def decided(self) -> Seen | None:
        """The gateway's verdict (accepted or rejected), once it is in the log."""
        return self.accepted or self.rejected
