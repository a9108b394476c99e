"""The only package that knows JetStream: server, connection, streams, the event store."""

from turnstream.bus.connection import connect
from turnstream.bus.contract import AppendConflict, EventStore, StoredEvent
from turnstream.bus.port import Bus

__all__ = ["AppendConflict", "Bus", "EventStore", "StoredEvent", "connect"]
