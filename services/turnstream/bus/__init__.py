"""The only package that knows JetStream: server, connection, streams, the event store."""

from turnstream.bus.connection import Bus, connect
from turnstream.bus.store import AppendConflict, EventStore, StoredEvent

__all__ = ["AppendConflict", "Bus", "EventStore", "StoredEvent", "connect"]
