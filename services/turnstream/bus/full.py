"""The log full: JetStream refusing appends for want of storage, classified once.

    nats-server's answer (err_code, description)          when
    10023 insufficient resources                           the server's `max_file_store`
                                                           (or the disk) is reached
    10047 insufficient storage resources available         the account's storage limit
    10077 maximum bytes exceeded                           a stream's `max_bytes` (discard
          maximum messages exceeded                        new), or its `max_msgs`, …
          maximum messages per subject exceeded

(10077 also says `message too large`: one message's fault, not the store's; not counted.)
Such a refusal stores nothing and will be refused again until an operator frees space
(docs/operations.md, "The log full"): a service that meets one keeps what it was doing
for later, backs off (`backoff_s`) and stays up. `ALARM` is the process's view: it logs
at ERROR once when refusals start (not once per message), at WARNING when an append goes
through again, counts them, and tells a hook (the OpenTelemetry metric,
`turnstream.runtime.otel`); `turnstream status` asks every process for it
(`STATUS_VERB`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from nats.js.api import DiscardPolicy

log = logging.getLogger("turnstream.bus")

INSUFFICIENT_RESOURCES = 10023
STORAGE_RESOURCES_EXCEEDED = 10047
STREAM_STORE_FAILED = 10077
FULL_CODES = frozenset({INSUFFICIENT_RESOURCES, STORAGE_RESOURCES_EXCEEDED})
STORE_FULL_WORDS = ("maximum bytes exceeded", "maximum messages")
"""What 10077 says when the stream's limit (not one message) is the cause."""
BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0)
"""Pauses before the n-th retry of work refused for storage: bounded, never a hot loop."""
STATUS_VERB = "storage"
"""`<prefix>.api.<service>.storage`: each process answers with `Alarm.snapshot()`."""


def full_code(err_code: int, description: str) -> bool:
    """Whether JetStream's error (`err_code`, `description`) means its storage is full."""
    if err_code in FULL_CODES:
        return True
    return err_code == STREAM_STORE_FAILED and any(w in description for w in STORE_FULL_WORDS)


def is_log_full(exc: BaseException) -> bool:
    """Whether `exc` (our `AppendError`, or nats-py's `APIError` from `js.publish`) is a
    refusal for want of storage."""
    err_code = getattr(exc, "err_code", None)
    if not isinstance(err_code, int):
        return False
    return full_code(err_code, str(getattr(exc, "description", "") or ""))


def backoff_s(attempt: int) -> float:
    """The pause before retry `attempt` (1-based) of work refused for storage."""
    return BACKOFF_S[min(max(attempt, 1), len(BACKOFF_S)) - 1]


def subject_kind(subject: str) -> str:
    """What a refusal is counted under: a bucket (`$KV.<bucket>`), else the subject's first
    two tokens (`ts.log`, `ts.in`). A log at its `max_bytes` refuses its appends while the
    buckets still take theirs: one kind going through does not end another's alarm."""
    tokens = subject.split(".", 2)
    return ".".join(tokens[:2])


@dataclass
class Alarm:
    """This process's view of the storage: which kinds of append are refused, since when."""

    runs: dict[str, float] = field(default_factory=dict)
    """Wall-clock time of the first refusal of the current run, per subject kind."""
    refused: int = 0
    """Appends refused for storage since the process started."""
    last_error: str = ""
    hook: Callable[[bool, str], None] | None = None
    """Told of each refusal (True, kind) and of the end of a run of them (False, kind)."""

    @property
    def full(self) -> bool:
        return bool(self.runs)

    def refusal(self, exc: BaseException, subject: str) -> None:
        """An append to `subject` was refused for storage: logged at ERROR on the first
        refusal of its kind (until one of that kind goes through again)."""
        kind = subject_kind(subject)
        self.refused += 1
        self.last_error = str(exc)
        if kind not in self.runs:
            self.runs[kind] = time.time()
            log.error(
                "the log is full: JetStream refused an append to %s (%s). Nothing is lost: "
                "the work is kept and retried with backoff until space is freed; see "
                "docs/operations.md, 'The log full' (`turnstream status` shows each stream "
                "against its limit)",
                subject,
                exc,
            )
        if self.hook is not None:
            self.hook(True, kind)

    def refusing(self, subject: str) -> str | None:
        """What refused the last append of `subject`'s kind, while its run lasts (None:
        appends of that kind are taken, as far as this process knows)."""
        return self.last_error if subject_kind(subject) in self.runs else None

    def stored(self, subject: str) -> None:
        """An append to `subject` went through: a run of refusals of its kind is over."""
        if not self.runs:
            return
        kind = subject_kind(subject)
        since = self.runs.pop(kind, None)
        if since is None:
            return
        log.warning(
            "appends to %s.* are taken again (refused for %.0f s)", kind, time.time() - since
        )
        if self.hook is not None:
            self.hook(False, kind)

    def snapshot(self) -> dict[str, Any]:
        """What `turnstream status` shows of this process."""
        return {
            "full": self.full,
            "refusing": dict(self.runs),
            "refused": self.refused,
            "lastError": self.last_error,
        }


ALARM = Alarm()
"""The process's one alarm (every store and appender of the process reports to it)."""


def noted(exc: BaseException, subject: str) -> bool:
    """`is_log_full(exc)`, and if so, reported to `ALARM` (a publish to `subject`)."""
    if not is_log_full(exc):
        return False
    ALARM.refusal(exc, subject)
    return True


SERVICES = ("gateway", "turn-runner", "tool-executor", "approval", "audit", "http")
"""Whose alarms `storage_usage` asks for."""
ASK_S = 0.5


async def stream_usage(js: Any, subjects: Any, names: list[str] | None = None) -> dict[str, Any]:
    """How full each stream of the deployment (or each of `names`, for a user that may not
    list streams) is against its limit, and the account's storage against its own;
    `atLimit` names those at it (`full_parts`)."""
    prefix = subjects.prefix
    streams: list[dict[str, Any]] = []
    infos = await js.streams_info() if names is None else [await js.stream_info(n) for n in names]
    for info in infos:
        name = info.config.name
        if not (name.startswith(prefix.upper() + "_") or f"_{prefix}_" in f"_{name}"):
            continue
        streams.append(
            {
                "stream": name,
                "bytes": info.state.bytes,
                "messages": info.state.messages,
                "maxBytes": info.config.max_bytes or -1,
                "maxMsgs": info.config.max_msgs or -1,
            }
        )
    account = await js.account_info()
    usage = {
        "streams": sorted(streams, key=lambda s: str(s["stream"])),
        "account": {"bytes": account.storage, "maxBytes": account.limits.max_storage},
    }
    return {**usage, "atLimit": full_parts(usage)}


def full_parts(usage: dict[str, Any]) -> list[str]:
    """The streams of `usage` at their limit, and `account` when it is at its own: each
    refuses appends (or is about to). `turnstream status` and the HTTP face say the log is
    full when one is, or when a process's appends are refused."""
    found = [s["stream"] for s in usage["streams"] if at_limit(s["bytes"], s["maxBytes"])]
    account = usage["account"]
    if at_limit(account["bytes"], account["maxBytes"] or -1):
        found.append("account")
    return found


async def storage_usage(nc: Any, js: Any, subjects: Any) -> dict[str, Any]:
    """`stream_usage`, and every running process's alarm (`turnstream status`)."""
    usage = await stream_usage(js, subjects)
    inbox = nc.new_inbox()
    answers: list[dict[str, Any]] = []

    async def on_answer(msg: Any) -> None:
        with contextlib.suppress(Exception):
            answers.append(orjson.loads(msg.data))

    sub = await nc.subscribe(inbox, cb=on_answer)
    try:
        for service in SERVICES:
            await nc.publish(subjects.api(service, STATUS_VERB), b"", reply=inbox)
        await nc.flush()
        await asyncio.sleep(ASK_S)
    finally:
        await sub.unsubscribe()
    return {**usage, "processes": sorted(answers, key=lambda a: str(a.get("source")))}


def at_limit(used: int, limit: int) -> bool:
    """Whether `used` bytes leave less than an event's room under `limit` (-1 or 0: none):
    64 KiB, or a twentieth of a smaller limit."""
    return limit > 0 and used >= limit - min(64 * 1024, limit // 20)


class AtLimit(Exception):
    """A stream (or the account) found at its storage limit before any append was tried."""


async def noted_at_limit(js: Any, streams: list[str], subject: str) -> bool:
    """Whether one of `streams` (discard new) or the account is at its storage limit; if so,
    reported to `ALARM` as a refusal of an append to `subject` would be. A process that
    starts on a full log knows it before its first append is refused: the turn-runner's
    resumed turns end `storage_full` rather than call the model again for an answer the log
    could not take (docs/operations.md, "The log full"). The server's `max_file_store`
    is not visible here: that one is found at the first append."""
    for name in streams:
        info = await js.stream_info(name)
        config, state = info.config, info.state
        if config.discard != DiscardPolicy.NEW:
            continue  # at its limit, it drops its oldest messages rather than refuse
        max_msgs = config.max_msgs or -1
        if at_limit(state.bytes, config.max_bytes or -1) or 0 < max_msgs <= state.messages:
            held = f"{state.bytes} bytes, {state.messages} messages"
            limit = f"max_bytes {config.max_bytes}, max_msgs {max_msgs}"
            ALARM.refusal(
                AtLimit(f"maximum bytes exceeded: {name} holds {held} ({limit})"), subject
            )
            return True
    account = await js.account_info()
    if at_limit(account.storage, account.limits.max_storage or -1):
        used = f"{account.storage} of its {account.limits.max_storage} bytes"
        ALARM.refusal(AtLimit(f"insufficient storage: the account uses {used}"), subject)
        return True
    return False
