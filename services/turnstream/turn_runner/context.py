"""What a session actor may use of its runner: narrow on purpose (the actor never sees the
`Runner`), and the mailbox items it is handed."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from turnstream.bus.contract import EventStore
from turnstream.context import ContextRegistry
from turnstream.core.events import Event, SessionConfiguredData
from turnstream.core.ids import IdFactory
from turnstream.core.turn import TurnConfig
from turnstream.hooks import HookRegistry
from turnstream.providers import Provider
from turnstream.turn_runner.items import Item as Item
from turnstream.turn_runner.ownership import SessionOwnership

LOADS_IN_FLIGHT = 32
"""Sessions a runner takes (lease) and loads (reads from the log) at once. A burst of new
sessions waits its turn here, holding no lease, so a lease is taken just before its
session is acted for and seldom needs renewing; one session already loaded is never held
up by it."""


@dataclass(frozen=True, slots=True)
class ActorContext:
    store: EventStore
    leases: SessionOwnership
    """Whether this runner acts for a session (`ownership.py`: its lease, or its partition)."""
    snapshots: Callable[[], Awaitable[Any]]
    """The snapshots bucket."""
    now: Callable[[], datetime]
    new_id: IdFactory
    source: str
    session: Callable[[str], tuple[Provider, TurnConfig]]
    """A session's provider and turn configuration."""
    agent_provider: Callable[[SessionConfiguredData], Provider | None]
    """The provider of an agent whose profile names its own (None: the session's)."""
    publish_inbound: Callable[[str, bytes, str], Awaitable[None]]
    """Publish a command to (session)'s inbound subject with a `Nats-Msg-Id`; returns once
    JetStream acknowledged it."""
    hooks: HookRegistry
    deliver: Callable[[str, Item], None]
    deliver_later: Callable[[str, Item, float], asyncio.TimerHandle]
    """Deliver an item after a delay; the handle cancels it."""
    spawn: Callable[[Coroutine[Any, Any, None], str], asyncio.Task[None]]
    observe: Callable[[Sequence[Event]], None]
    """Hand appended stage events to observer hooks."""
    publish_live: Callable[[str, str, bytes], Awaitable[None]]
    """Publish a token delta of (session, turn)."""
    reloaded: Callable[[int], None]
    """Count events read back by a reload."""
    storage_refused: Callable[[str], str | None] = lambda session_id: None
    """Why this process's appends to (session)'s log are refused for storage now (its
    alarm, `bus/full.py`), None while they are taken."""
    context: ContextRegistry | None = None
    """The context providers asked at each turn's first COMPOSE_REQUEST."""
    loads: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(LOADS_IN_FLIGHT))
    """The runner's load slots (`LOADS_IN_FLIGHT`), one semaphore shared by its actors."""
    attachment: Callable[[str], Awaitable[bytes | None]] | None = None
    """An attachment's bytes by SHA-256 from the object store (None: not there)."""
