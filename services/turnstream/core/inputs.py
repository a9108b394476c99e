"""The inputs and effects every decider shares: a fact from the log, a wake-up, and the
wish to be woken at a time. Each decider adds its own (`turnstream.core.session.decider`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from turnstream.core.events import Event


@dataclass(frozen=True, slots=True)
class Fact:
    """A fact from the log the decider has not folded yet."""

    event: Event


@dataclass(frozen=True, slots=True)
class Tick:
    """Decide again: a bound, a deadline, a deferred gate or a backoff may have passed, or
    (for the turn-runner) the session's lease came free."""


@dataclass(frozen=True, slots=True)
class WakeAt:
    """Deliver a Tick at `at`."""

    at: datetime
