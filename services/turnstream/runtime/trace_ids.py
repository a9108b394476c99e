"""The ids a turn's telemetry derives from its events alone (no OpenTelemetry): every
process finds the same trace and span ids for a turn, a workflow run and their parents."""

from __future__ import annotations

import functools
import hashlib
import uuid

AGENT_NAME = "turnstream"
"""`gen_ai.agent.name` of a turn (one agent runs every session here)."""
SCOPE = "turnstream"
MAX_OPEN_TURNS = 10_000
"""Turns a runner keeps token counts for; the oldest are forgotten past this (a turn that
moved to another runner never ends here)."""


@functools.lru_cache(maxsize=4096)  # asked for every event appended, per turn the same
def trace_id_of(trace_id: str) -> int:
    """The W3C trace id of an envelope's `traceId`: its 128 bits when it is a UUID (the
    gateway's are UUIDv7), else the first 128 bits of its BLAKE2b digest."""
    try:
        value = uuid.UUID(trace_id).int
    except ValueError:
        value = int.from_bytes(hashlib.blake2b(trace_id.encode(), digest_size=16).digest())
    return value or 1


@functools.lru_cache(maxsize=4096)
def turn_span_id(turn_id: str) -> int:
    """The span id of a turn's `invoke_agent` span, which every process can derive."""
    digest = hashlib.blake2b(f"invoke_agent:{turn_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest) or 1


def run_span_id(run_id: str) -> int:
    """The span id of a workflow run's span (the parent of its stage turns' spans)."""
    digest = hashlib.blake2b(f"run_workflow:{run_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest) or 1


@functools.lru_cache(maxsize=4096)
def traceparent(trace_id: int, span_id: int, sampled: bool = True) -> str:
    """A W3C `traceparent` header value (version 00)."""
    return f"00-{trace_id:032x}-{span_id:016x}-{'01' if sampled else '00'}"


def uuid7_time_ns(value: str) -> int | None:
    """The Unix time (ns) a UUIDv7 was made at; None for any other string."""
    try:
        parsed = uuid.UUID(value)
    except ValueError:
        return None
    return (parsed.int >> 80) * 1_000_000 if parsed.version == 7 else None
