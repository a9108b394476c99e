"""Subject, stream and bucket names: the one place that spells them (DESIGN §3)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from turnstream.core.partition import partition

SESSION_ID_PATTERN = r"^[A-Za-z0-9_:-]{1,128}$"
_SESSION_ID = re.compile(SESSION_ID_PATTERN)

AGENT_DOOR = "agent"
"""The last token of `<prefix>.in.<session>.agent`, the runtime's own inbound subject."""
ANSWER_DOOR = "answer"
"""The last token of `<prefix>.in.<session>.answer`, the people's door for answers alone."""
DOORS = (AGENT_DOOR, ANSWER_DOOR)
"""The inbound subject forms that take some commands only (`core.commands.DOOR_COMMANDS`)."""

REJECTED_SESSION = "_rejected"
"""Where input whose session id is unusable is recorded (the subject cannot carry it).
Reserved: no command may address it (`is_reserved_session`), so no turn ever runs in it."""


def is_session_id(value: str) -> bool:
    """True when `value` is a subject-safe session id."""
    return bool(_SESSION_ID.match(value))


def is_reserved_session(value: str) -> bool:
    """True for the session ids the runtime keeps for itself (today: `_rejected`)."""
    return value == REJECTED_SESSION


def session_key(session_id: str) -> str:
    """A session's key in a KV bucket: keys cannot hold `:`, session ids cannot hold `=`."""
    return session_id.replace(":", "=")


def session_from_key(key: str) -> str:
    """The session id a `session_key` was made from."""
    return key.replace("=", ":")


@dataclass(frozen=True, slots=True)
class Subjects:
    """Names for one deployment; `prefix` lets several deployments share an account."""

    prefix: str = "ts"
    log_partitions: int = 1
    """How many streams the log is split over (docs/scaling.md): 1 is one `TS_LOG`; N > 1
    is `TS_LOG_0` … `TS_LOG_<N-1>`, a session's events all in `partition_of(session)`."""

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", self.prefix):
            raise ValueError(
                f"subject prefix {self.prefix!r} must be 1-32 of [A-Za-z0-9_-] "
                "(set TURNSTREAM_PREFIX to a plain token such as 'ts')"
            )
        if not 1 <= self.log_partitions <= 1024:
            raise ValueError(
                f"log_partitions {self.log_partitions} must be 1-1024 "
                "(TURNSTREAM_LOG_PARTITIONS; 1 is one log stream)"
            )

    # streams, buckets
    @property
    def inbound_stream(self) -> str:
        return f"{self.prefix.upper()}_INBOUND"

    @property
    def log_stream(self) -> str:
        """The log's stream when it is one (`log_partitions` 1); else the partitions'
        common name, `log_stream_at(k)` is partition k's."""
        return f"{self.prefix.upper()}_LOG"

    @property
    def partitioned(self) -> bool:
        return self.log_partitions > 1

    def partition_of(self, session_id: str) -> int:
        """The log partition holding every event of `session_id` (0 when there is one)."""
        return partition(session_id, self.log_partitions) if self.partitioned else 0

    def log_stream_at(self, k: int) -> str:
        """The stream of log partition `k`."""
        return f"{self.log_stream}_{k}" if self.partitioned else self.log_stream

    def log_stream_of(self, session_id: str) -> str:
        """The stream holding `session_id`'s events: every reader of one session names it."""
        return self.log_stream_at(self.partition_of(session_id))

    @property
    def log_streams(self) -> list[str]:
        """Every log stream, partition 0 first."""
        return [self.log_stream_at(k) for k in range(self.log_partitions)]

    @property
    def leases_bucket(self) -> str:
        return f"{self.prefix}_leases"

    @property
    def sessions_bucket(self) -> str:
        return f"{self.prefix}_sessions"

    @property
    def snapshots_bucket(self) -> str:
        """Turn-runner session snapshots: `<session>` → state as of a log sequence."""
        return f"{self.prefix}_snapshots"

    @property
    def invocations_bucket(self) -> str:
        """Tool invocation claims: `<invocation id>` → who runs it, and whether it is done."""
        return f"{self.prefix}_invocations"

    @property
    def hooks_bucket(self) -> str:
        """Remote hooks: `<name>` → their `HookSpec` JSON."""
        return f"{self.prefix}_hooks"

    @property
    def idempotency_bucket(self) -> str:
        """Claimed idempotency keys: `<session>.<sha256(key)>` → the inbound seq (gateway)."""
        return f"{self.prefix}_idempotency"

    @property
    def blobs_bucket(self) -> str:
        """Object store of the services' own payloads: tool results above the result budget
        (the tool-executor's) and archived sessions (the operator's)."""
        return f"{self.prefix}_blobs"

    @property
    def attachments_bucket(self) -> str:
        """Object store of the files messages carry, `att/<sha256>`: written by the doors
        (gateway, HTTP, channels), which may not write `blobs_bucket`."""
        return f"{self.prefix}_attachments"

    # inbound
    def inbound(self, session_id: str) -> str:
        return f"{self.prefix}.in.{session_id}"

    def inbound_agent(self, session_id: str) -> str:
        """The runtime's own door into a session, `<prefix>.in.<session>.agent`: what the
        turn-runner sends (a reply to `replyTo`, `send_message`, `spawn`, an interrupt of a
        sub-turn). The gateway takes only `message` and `interrupt` commands there, and the
        turn-runner's NATS user may publish to no other inbound subject (ops/accounts.conf),
        so a runner cannot answer a prompt for a person. Outside gateways use `inbound`."""
        return self.inbound_through(session_id, AGENT_DOOR)

    def inbound_answer(self, session_id: str) -> str:
        """The people's door for answers, `<prefix>.in.<session>.answer`: the gateway takes
        only `answer` commands there, and the `approver` NATS user may publish to no other
        inbound subject (ops/accounts.conf), so an approver answers prompts but cannot start,
        steer or interrupt a turn. An answer on `inbound` is taken too (for users allowed
        there)."""
        return self.inbound_through(session_id, ANSWER_DOOR)

    def inbound_through(self, session_id: str, door: str | None) -> str:
        """A session's inbound subject through `door` (one of `DOORS`; None: `inbound`)."""
        base = self.inbound(session_id)
        return base if door is None else f"{base}.{door}"

    @property
    def inbound_all(self) -> str:
        """Every form of every session's inbound subject (the stream's, the gateway's)."""
        return f"{self.prefix}.in.>"

    def session_from_inbound(self, subject: str) -> str:
        """The session token of an inbound subject of any form (may be invalid; the
        gateway checks)."""
        rest = subject[len(self.prefix) + 4 :]
        door = self.door_of(subject)
        return rest if door is None else rest.removesuffix(f".{door}")

    def door_of(self, subject: str) -> str | None:
        """Which door an inbound subject is (`AGENT_DOOR`, `ANSWER_DOOR`), None for the
        plain `<prefix>.in.<session>`."""
        rest = subject[len(self.prefix) + 4 :]
        return next((d for d in DOORS if rest.endswith(f".{d}")), None)

    # log
    def log(self, session_id: str, event_type: str) -> str:
        return f"{self.prefix}.log.{session_id}.{event_type}"

    def log_session(self, session_id: str) -> str:
        return f"{self.prefix}.log.{session_id}.>"

    def log_kind(self, event_type: str) -> str:
        """Every session's events of one kind as stored (a consumer's filter)."""
        return f"{self.prefix}.log.*.{event_type}"

    def log_live(self, session_id: str, event_type: str) -> str:
        """A session's events of one kind as a core subscriber sees them: the mapping of a
        partitioned log adds the partition token (`ts.log.<s>.>` needs nothing added)."""
        subject = self.log(session_id, event_type)
        return f"{subject}.*" if self.partitioned else subject

    def log_kind_live(self, event_type: str) -> str:
        """Every session's events of one kind as a core subscriber sees them."""
        return self.log_live("*", event_type)

    def log_partition_subjects(self, k: int) -> str:
        """What partition `k`'s stream takes: the mapped subjects ending in `k`."""
        return f"{self.prefix}.log.*.*.{k}"

    @property
    def log_mappings(self) -> dict[str, str]:
        """The account's subject mappings a partitioned log needs (none for one stream).

        The first puts every event of a session in its partition. nats-server checks a
        publish's rights on the subject after mapping, so a user allowed the mapped
        `<prefix>.log.*.<Type>.*` could also publish to a partition directly, bypassing the
        hash; the second maps any such publish onto `<prefix>.refused.…`, which no user
        may publish to and no stream takes."""
        if not self.partitioned:
            return {}
        p = self.prefix
        return {
            f"{p}.log.*.*": (
                f"{p}.log.{{{{wildcard(1)}}}}.{{{{wildcard(2)}}}}."
                f"{{{{partition({self.log_partitions},1)}}}}"
            ),
            f"{p}.log.*.*.*": (
                f"{p}.refused.log.{{{{wildcard(1)}}}}.{{{{wildcard(2)}}}}.{{{{wildcard(3)}}}}"
            ),
        }

    @property
    def log_stored(self) -> str:
        """The subject transform's destination: a partition stream stores today's subject."""
        return f"{self.prefix}.log.{{{{wildcard(1)}}}}.{{{{wildcard(2)}}}}"

    def session_from_log(self, subject: str) -> str:
        """The session token of a log subject `<prefix>.log.<session>.<EventType>`, also
        as a live subscriber of a partitioned log sees it (`….<EventType>.<partition>`)."""
        start = len(self.prefix) + 5
        return subject[start : subject.index(".", start)]

    def type_from_log(self, subject: str) -> str:
        """The event type of a log subject (stored, or live with its partition token)."""
        start = subject.index(".", len(self.prefix) + 5) + 1
        end = subject.find(".", start)
        return subject[start:] if end < 0 else subject[start:end]

    @property
    def log_all(self) -> str:
        return f"{self.prefix}.log.>"

    # live tokens, service requests
    def live(self, session_id: str, turn_id: str) -> str:
        return f"{self.prefix}.live.{session_id}.{turn_id}"

    def live_session(self, session_id: str) -> str:
        return f"{self.prefix}.live.{session_id}.*"

    @property
    def live_all(self) -> str:
        """Every session's token deltas (a chat channel picks its own sessions')."""
        return f"{self.prefix}.live.>"

    def session_from_live(self, subject: str) -> str:
        """The session of a `live(session, turn)` subject."""
        return subject.split(".")[-2]

    def deliver(self, consumer: str, partition: int | None = None) -> str:
        """Where a push consumer delivers (outside every stream's subjects); on a
        partitioned log, the consumer `consumer` of partition `k`'s stream has its own
        subject, so an instance that binds some partitions gets theirs only."""
        base = f"{self.prefix}.deliver.{consumer}"
        return f"{base}.{partition}" if self.partitioned and partition is not None else base

    def api(self, service: str, verb: str) -> str:
        return f"{self.prefix}.api.{service}.{verb}"
