"""Idempotent creation of the streams and buckets (DESIGN §3); `ops/` documents the same."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nats.js import api
from nats.js.errors import BadRequestError

from turnstream.core.subjects import Subjects

DAY_S = 86_400.0
DEAD_LETTER_MAX_AGE_DAYS = 30.0
LEASE_MARKER_TTL_S = 60.0
"""How long the marker of an expired lease stays (runners watching the bucket see it at once)."""


@dataclass(frozen=True)
class StreamLimits:
    log_max_age_days: float = 0
    inbound_max_age_days: float = 7
    duplicate_window_s: float = 120
    max_msg_size: int = 8 * 1024 * 1024
    replicas: int = 1


def stream_configs(subjects: Subjects, limits: StreamLimits) -> list[api.StreamConfig]:
    common: dict[str, Any] = {
        "storage": api.StorageType.FILE,
        "retention": api.RetentionPolicy.LIMITS,
        "duplicate_window": limits.duplicate_window_s,
        "max_msg_size": limits.max_msg_size,
        "num_replicas": limits.replicas,
    }
    return [
        api.StreamConfig(
            name=subjects.inbound_stream,
            subjects=[subjects.inbound_all],
            max_age=limits.inbound_max_age_days * DAY_S,
            description="turnstream inbound commands (Nats-Msg-Id = idempotencyKey)",
            **common,
        ),
        api.StreamConfig(
            name=subjects.log_stream,
            subjects=[subjects.log_all],
            max_age=limits.log_max_age_days * DAY_S,
            allow_direct=True,
            allow_batched=True,  # a decision is appended as one fast-ingest batch
            description="turnstream event log: <prefix>.log.<session>.<EventType>",
            **common,
        ),
        api.StreamConfig(
            name=dead_letter_stream(subjects.prefix),
            subjects=[f"{subjects.prefix}.dead.>"],
            max_age=DEAD_LETTER_MAX_AGE_DAYS * DAY_S,
            description=(
                "turnstream dead letters: messages a consumer gave up on (undecodable, or "
                "failing every delivery), as they were, with why in Ts-Dead-* headers: "
                "<prefix>.dead.<stream>.<consumer>"
            ),
            **common,
        ),
    ]


def dead_letter_stream(prefix: str) -> str:
    return f"{prefix.upper()}_DEAD"


def dead_letter_subject(prefix: str, stream: str, consumer: str) -> str:
    return f"{prefix}.dead.{stream}.{consumer}"


def describe(subjects: Subjects, limits: StreamLimits) -> list[dict[str, Any]]:
    """The stream definitions as JSON-ready dicts (what `ops/streams.json` documents)."""
    return [config.as_dict() for config in stream_configs(subjects, limits)]


async def ensure_streams(js: Any, subjects: Subjects, limits: StreamLimits) -> None:
    """Create or update the streams and KV buckets; safe to call from every service."""
    for config in stream_configs(subjects, limits):
        try:
            await js.add_stream(config=config)
        except BadRequestError:
            await js.update_stream(config=config)
    for bucket in (
        subjects.leases_bucket,
        subjects.sessions_bucket,
        subjects.snapshots_bucket,
        subjects.invocations_bucket,
        subjects.hooks_bucket,
    ):
        marker_ttl = LEASE_MARKER_TTL_S if bucket == subjects.leases_bucket else None
        kv_config = api.KeyValueConfig(
            bucket=bucket,
            history=1,
            storage=api.StorageType.FILE,
            replicas=limits.replicas,
            limit_marker_ttl=marker_ttl,
        )
        try:
            await js.create_key_value(config=kv_config)
        except BadRequestError:
            if bucket != subjects.leases_bucket:
                raise  # a real mismatch (replicas, say): say so
            # a leases bucket from before expiry markers: add them
            info = await js.stream_info(f"KV_{bucket}")
            info.config.subject_delete_marker_ttl = marker_ttl
            await js.update_stream(config=info.config)
    await js.create_object_store(  # nats-py takes the name from `bucket`, not the config
        bucket=subjects.blobs_bucket,
        config=api.ObjectStoreConfig(storage=api.StorageType.FILE, replicas=limits.replicas),
    )
