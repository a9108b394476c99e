"""The streams and buckets of a deployment, defined once (DESIGN §3, §13): the setup step
(`turnstream streams apply`, run as the operator, and `turnstream up`) creates them with
`ensure_streams`; a service only checks they exist (`check_streams`) and never creates,
updates, purges or deletes one. `ops/streams.json` documents the streams."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from nats.js import api
from nats.js.errors import BadRequestError, BucketNotFoundError, NotFoundError

from turnstream.bus.kv import open_or_create
from turnstream.core.subjects import Subjects

DAY_S = 86_400.0
DEAD_LETTER_MAX_AGE_DAYS = 30.0
LEASE_MARKER_TTL_S = 60.0
"""How long the marker of an expired lease stays (runners watching the bucket see it at once)."""
A2A_TASK_MAX_AGE_S = 30 * DAY_S
"""An A2A task is kept 30 days after its last change (the log keeps the turn itself)."""
SETUP_STEP = (
    "streams, buckets and durable consumers are created by the setup step: run "
    "`turnstream streams apply` as the operator user (TURNSTREAM_NATS_USER=operator), or "
    "`turnstream up`, which runs it"
)


@dataclass(frozen=True)
class StreamLimits:
    log_max_age_days: float = 0
    inbound_max_age_days: float = 7
    invocation_max_age_days: float = 1
    duplicate_window_s: float = 120
    max_msg_size: int = 8 * 1024 * 1024
    replicas: int = 1
    a2a_push_timeout_s: float = 10.0
    """The A2A push delivery's webhook timeout: its durable's ack wait follows from it."""


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
        *log_configs(subjects, limits, common),
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


def log_configs(
    subjects: Subjects, limits: StreamLimits, common: dict[str, Any]
) -> list[api.StreamConfig]:
    """The log: one stream, or one per partition (docs/scaling.md §2) taking the mapped
    `<prefix>.log.<session>.<EventType>.<k>` and storing it as `<…>.<EventType>` again."""
    settings: dict[str, Any] = {
        "max_age": limits.log_max_age_days * DAY_S,
        "allow_direct": True,
        "allow_batched": True,  # a decision is appended as one fast-ingest batch
        **common,
    }
    if not subjects.partitioned:
        return [
            api.StreamConfig(
                name=subjects.log_stream,
                subjects=[subjects.log_all],
                description="turnstream event log: <prefix>.log.<session>.<EventType>",
                **settings,
            )
        ]
    n = subjects.log_partitions
    return [
        api.StreamConfig(
            name=subjects.log_stream_at(k),
            subjects=[subjects.log_partition_subjects(k)],
            subject_transform=api.SubjectTransform(
                src=subjects.log_partition_subjects(k), dest=subjects.log_stored
            ),
            description=(
                f"turnstream event log, partition {k} of {n}: "
                "<prefix>.log.<session>.<EventType> of the sessions it holds"
            ),
            **settings,
        )
        for k in range(n)
    ]


def dead_letter_stream(prefix: str) -> str:
    return f"{prefix.upper()}_DEAD"


def dead_letter_subject(prefix: str, stream: str, consumer: str) -> str:
    return f"{prefix}.dead.{stream}.{consumer}"


def describe(subjects: Subjects, limits: StreamLimits) -> list[dict[str, Any]]:
    """The stream definitions as JSON-ready dicts (what `ops/streams.json` documents)."""
    return [config.as_dict() for config in stream_configs(subjects, limits)]


def bucket_configs(subjects: Subjects, limits: StreamLimits) -> list[api.KeyValueConfig]:
    """Every KV bucket of a deployment. A new bucket is added here (and its users' rights
    in ops/accounts.conf); its service opens it with `existing_bucket`."""

    def kv(bucket: str, ttl: float | None = None, **more: Any) -> api.KeyValueConfig:
        return api.KeyValueConfig(
            bucket=bucket,
            history=1,
            ttl=ttl,
            storage=api.StorageType.FILE,
            replicas=limits.replicas,
            **more,
        )

    inbound_age = limits.inbound_max_age_days * DAY_S

    def marker_ttl(bucket: str) -> float | None:  # expiries leave a marker in the leases
        return LEASE_MARKER_TTL_S if bucket == subjects.leases_bucket else None

    def ttl(bucket: str) -> float | None:  # an invocation's claim outlives its redeliveries
        claims = limits.invocation_max_age_days * DAY_S
        return (claims or None) if bucket == subjects.invocations_bucket else None

    return [
        *(
            kv(bucket, ttl(bucket), limit_marker_ttl=marker_ttl(bucket))
            for bucket in shared_buckets(subjects)
        ),
        kv(
            subjects.idempotency_bucket,
            inbound_age or None,
            description="turnstream idempotency keys: <session>.<sha256(key)> -> inbound seq",
        ),
        kv(tools_bucket(subjects.prefix)),
        kv(a2a_tasks_bucket(subjects.prefix), A2A_TASK_MAX_AGE_S),
        kv(a2a_push_bucket(subjects.prefix), A2A_TASK_MAX_AGE_S),
        *(kv(channel_bucket(subjects.prefix, p)) for p in CHANNEL_PLATFORMS),
    ]


def shared_buckets(subjects: Subjects) -> tuple[str, ...]:
    """The buckets several services use: each service checks them at start."""
    return (
        subjects.leases_bucket,
        subjects.sessions_bucket,
        subjects.snapshots_bucket,
        subjects.invocations_bucket,
        subjects.hooks_bucket,
    )


def tools_bucket(prefix: str) -> str:
    """The executors' tool manifest (`turnstream.runtime.manifest`)."""
    return f"{prefix}_tools"


def a2a_tasks_bucket(prefix: str) -> str:
    """The HTTP face's A2A task store (`turnstream.http.a2a.store`)."""
    return f"{prefix}_a2a_tasks"


def a2a_push_bucket(prefix: str) -> str:
    """The HTTP face's A2A push-notification configs (`turnstream.http.a2a.push`)."""
    return f"{prefix}_a2a_push"


CHANNEL_PLATFORMS = ("telegram", "slack")
"""The chat platforms with a channel (`turnstream.channels.<platform>`): each has its KV
bucket (`channel_bucket`), its log durable (`bus.durables.channel`) and its NATS user."""


def channel_bucket(prefix: str, platform: str) -> str:
    """A chat channel's records (`turnstream.channels.records`): what it posted per turn,
    pairing codes and paired senders, `/new` session generations."""
    return f"{prefix}_channel_{platform}"


def checked_streams(subjects: Subjects) -> list[str]:
    """What every service checks at start: the streams, and the buckets several use (one
    service's own bucket is checked when it opens it)."""
    return [
        subjects.inbound_stream,
        *subjects.log_streams,
        dead_letter_stream(subjects.prefix),
        *(f"KV_{bucket}" for bucket in shared_buckets(subjects)),
        f"OBJ_{subjects.blobs_bucket}",
        f"OBJ_{subjects.attachments_bucket}",
    ]


class StreamsMissing(RuntimeError):
    """A service started before the setup step created its streams."""


class LogPartitionsDiffer(StreamsMissing):
    """The deployment's log is in another number of partitions than this process's
    `TURNSTREAM_LOG_PARTITIONS`: chosen once, when the log is created."""


async def existing_log_partitions(js: Any, subjects: Subjects) -> int | None:
    """How many partitions the deployment's log has (1: the one stream), None if none: as
    partition 0's description says (`partition 0 of N`, so a setup step stopped halfway
    is still known for what it was making)."""
    name = subjects.log_stream  # `<PREFIX>_LOG`, and `<PREFIX>_LOG_<k>` for each partition
    if await _info(js, name) is not None:
        return 1
    return _partitions_said(await _info(js, f"{name}_0"))


def _partitions_said(first: Any) -> int | None:
    """The partitions a log's partition 0 says it is one of (its description)."""
    said = re.search(r"partition 0 of (\d+)", first.config.description or "") if first else None
    return int(said.group(1)) if said else None


async def _info(js: Any, stream: str) -> Any:
    try:
        return await js.stream_info(stream)
    except NotFoundError:
        return None


async def check_log_partitions(js: Any, subjects: Subjects) -> None:
    """`LogPartitionsDiffer`, naming the fix, when the log exists in another number of
    partitions than `subjects` has (the setup step, which may look at every stream)."""
    _refuse_other_count(await existing_log_partitions(js, subjects), subjects)


def _refuse_other_count(existing: int | None, subjects: Subjects) -> None:
    if existing is not None and existing != subjects.log_partitions:
        raise LogPartitionsDiffer(
            f"the log is {existing} partition(s) ({subjects.log_stream}"
            f"{'_0…' if existing > 1 else ''}) but TURNSTREAM_LOG_PARTITIONS is "
            f"{subjects.log_partitions}: the number is chosen once, when the log is "
            f"created; set TURNSTREAM_LOG_PARTITIONS={existing} for every process of this "
            "deployment (a different number needs a new deployment: docs/scaling.md)"
        )


async def check_streams(js: Any, subjects: Subjects) -> None:
    """`StreamsMissing`, naming the fix, unless every stream and shared bucket exists and
    the log is in as many partitions as `subjects` says (a process with another number
    would look for sessions in the wrong partitions). A service may look at its own log
    streams only (its rights in ops/accounts.conf): partition 0's description says how
    many there are; a log of one stream shows as the partitions missing."""
    found = {name: await _info(js, name) for name in checked_streams(subjects)}
    if subjects.partitioned:
        _refuse_other_count(_partitions_said(found[subjects.log_stream_at(0)]), subjects)
    missing = [name for name, info in found.items() if info is None]
    if missing:
        log_missing = set(missing) & set(subjects.log_streams)
        hint = (
            f" (or the log is in another number of partitions than "
            f"TURNSTREAM_LOG_PARTITIONS={subjects.log_partitions}: give every process the "
            "deployment's)"
            if log_missing
            else ""
        )
        raise StreamsMissing(f"{', '.join(missing)} missing: {SETUP_STEP}{hint}")


async def existing_bucket(js: Any, bucket: str) -> Any:
    """The KV bucket `bucket`, which the setup step created (`bucket_configs`); a service
    never creates one. Missing: `StreamsMissing`, naming the setup step."""
    try:
        return await js.key_value(bucket)
    except BucketNotFoundError as exc:
        raise StreamsMissing(f"bucket {bucket} missing: {SETUP_STEP}") from exc


async def _align_bucket(js: Any, config: api.KeyValueConfig) -> None:
    """Give a bucket that exists the age and expiry markers its definition asks for now
    (one from before a bound, or before markers, or with another bound asked for); the
    rest of its settings stay as they were made."""
    info = await js.stream_info(f"KV_{config.bucket}")
    made = info.config
    age = config.ttl or 0
    marker = config.limit_marker_ttl or made.subject_delete_marker_ttl
    if (made.max_age or 0) == age and made.subject_delete_marker_ttl == marker:
        return
    made.max_age, made.subject_delete_marker_ttl = age, marker
    await js.update_stream(config=made)


STREAM_NAME_IN_USE = 10058
"""JetStream's `stream name already in use with a different configuration`."""


async def ensure_streams(js: Any, subjects: Subjects, limits: StreamLimits) -> None:
    """The setup step: create or update the streams, create the buckets missing (one that
    exists keeps its settings, but its age and expiry markers: `_align_bucket`);
    idempotent. A log of another number of partitions is left as it is:
    `LogPartitionsDiffer`."""
    await check_log_partitions(js, subjects)
    for config in stream_configs(subjects, limits):
        try:
            await js.add_stream(config=config)
        except BadRequestError as exc:
            if exc.err_code != STREAM_NAME_IN_USE:
                raise  # e.g. a cluster that cannot place it yet, which `retried` waits for
            await js.update_stream(config=config)  # it exists with another configuration
    for kv_config in bucket_configs(subjects, limits):
        await open_or_create(js, kv_config)
        await _align_bucket(js, kv_config)
    for bucket in (subjects.blobs_bucket, subjects.attachments_bucket):
        await js.create_object_store(  # nats-py takes the name from `bucket`, not the config
            bucket=bucket,
            config=api.ObjectStoreConfig(storage=api.StorageType.FILE, replicas=limits.replicas),
        )
