"""What every service shell shares: the real clock and ids, its connection, its process,
its plug-ins. Each concept has its module; this package re-exports them."""

from turnstream.runtime.clock import new_event_id, now, source_name
from turnstream.runtime.connection import (
    apply_streams,
    connect_client,
    connect_service,
    service_bus,
    stream_limits,
)
from turnstream.runtime.plugins import tool_infos, watch_hooks
from turnstream.runtime.process import YOUNG_GC_EVERY, loop_factory, run_service, tune_gc

__all__ = [
    "YOUNG_GC_EVERY",
    "apply_streams",
    "connect_client",
    "connect_service",
    "loop_factory",
    "new_event_id",
    "now",
    "run_service",
    "service_bus",
    "source_name",
    "stream_limits",
    "tool_infos",
    "tune_gc",
    "watch_hooks",
]
