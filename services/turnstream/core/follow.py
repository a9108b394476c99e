"""What became of one published command, followed in the log to its `TurnEnded` (pure: no
I/O): the one fold the client (`send_and_wait`), the HTTP face and the A2A edge follow a
command with.

The gateway records its verdict on a command as one event that names the command's
inbound stream sequence (`data.inboundSeq`, exact even where the idempotency key is not
carried, as in a rejected `attach`; a follower that knows only the key matches the verdict
by its `correlationId`): `InputAccepted` (message, steer),
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
    stored at `inbound_seq` in the inbound stream (or, None, the command whose
    idempotency key is `key`: a retry hears back from the first command's turn)."""

    inbound_seq: int | None
    key: str | None = None
    accepted: Seen | None = None
    rejected: Seen | None = None
    ended: Seen | None = None
    turn_id: str | None = None
    """The turn the command's outcome belongs to (changes when a message is steered)."""
    waiting: Seen | None = None
    """The turn's open approval prompt (`InteractionRequested`): it waits on a person."""

    def feed(self, seq: int, event: Event) -> bool:
        """Fold one event of the session; whether it concerns the command (its verdict, an
        event of its turn, or one that carries its key)."""
        keyed = self.key is not None and event.correlation_id == self.key
        if self.decided is None:
            if isinstance(event, ACCEPTED_TYPES) and self._names(event):
                self.accepted = Seen(seq, event)
                self.turn_id = event.turn_id
                return True
            if isinstance(event, InputRejected) and self._names(event):
                self.rejected = Seen(seq, event)
                self.turn_id = event.turn_id
                return True
            return keyed
        accepted = self.accepted
        if (
            isinstance(event, SteeringInjected)
            and accepted is not None
            and event.data.input_id == accepted.event.id
        ):
            self.turn_id = event.turn_id  # from now on, follow the turn it joined
        elif not self.turn_id or event.turn_id != self.turn_id:
            return keyed
        elif isinstance(event, InteractionRequested):
            self.waiting = Seen(seq, event)
        elif isinstance(event, ToolCallApproved | ToolCallDenied) and self.waiting is not None:
            prompt = self.waiting.event
            assert isinstance(prompt, InteractionRequested)
            if event.data.invocation_id == prompt.data.invocation_id:
                self.waiting = None
        elif isinstance(event, TurnEnded) and self.ended is None:
            self.ended = Seen(seq, event)
        return True

    def _names(self, verdict: Event) -> bool:
        """Whether a verdict of the gateway is on the followed command."""
        if self.inbound_seq is None:
            return verdict.correlation_id == self.key
        return getattr(verdict.data, "inbound_seq", None) == self.inbound_seq

    @property
    def decided(self) -> Seen | None:
        """The gateway's verdict (accepted or rejected), once it is in the log."""
        return self.accepted or self.rejected
