"""The storage question, as the HTTP face answers it (docs/operations.md, "The log full"):
`/readyz` shows how full the inbound and log streams are and the face's own alarm, as
`turnstream status` does; a command sent while the log is full is a 503 `storage-full`
problem, nothing stored.

The streams are read at most every `FRESH_S` (their `STREAM.INFO` and the account's info),
so the POST path pays for a read once a second, not per request. The other processes'
alarms are not asked (`ts.api.<service>.storage`): the face's NATS user may not publish
there (nor list streams), and a stream at its limit is what they would report.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from turnstream.bus import Bus
from turnstream.bus.full import ALARM
from turnstream.core.events import FailureClass
from turnstream.http.problems import Problem

FRESH_S = 1.0
"""How long one read of the streams' usage is reused."""
READ_S = 1.0
"""The most a command waits for that read (NATS slow: it is sent unchecked)."""
RETRY_AFTER_S = 30
"""What a refused submitter is told to wait (the services retry at most every 30 s)."""


class Storage:
    """The deployment's storage as the face last read it."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.usage: dict[str, Any] | None = None
        self.read_at = 0.0
        self.reading = asyncio.Lock()

    async def read(self) -> dict[str, Any]:
        """Each stream against its limit, the account's, which are at it (`atLimit`), the
        face's own alarm (`face`) and the verdict (`full`)."""
        async with self.reading:  # requests at once share one read
            if self.usage is None or time.monotonic() - self.read_at > FRESH_S:
                subjects = self.bus.subjects
                names = [subjects.inbound_stream, *subjects.log_streams]
                self.usage = await self.bus.stream_usage(names)
                self.read_at = time.monotonic()
        face = ALARM.snapshot()
        return {**self.usage, "face": face, "full": bool(self.usage["atLimit"] or face["full"])}

    async def refuse_when_full(self, key: str) -> None:
        """A 503 `storage-full` problem when a log stream is at its limit: the command would
        be stored and wait unanswered until space is freed. (The inbound stream or the
        account full refuses the publish itself, which `submit.publish` says.)"""
        try:
            async with asyncio.timeout(READ_S):
                usage = await self.read()
        except Exception:  # not known now (NATS slow): the publish goes on as before
            return
        full = [name for name in usage["atLimit"] if name in self.bus.subjects.log_streams]
        if not full:
            return
        raise full_problem(
            f"{' and '.join(full)} at its storage limit; nothing was stored: send it again "
            "once the operator has freed space (docs/operations.md, 'The log full')",
            key,
        )


def full_problem(detail: str, key: str, **extra: Any) -> Problem:
    """The problem a command refused for storage is answered with."""
    return Problem(
        503,
        "storage-full",
        "The log is full",
        detail,
        failure_class=FailureClass.STORAGE_FULL,
        headers={"Retry-After": str(RETRY_AFTER_S)},
        idempotencyKey=key,
        **extra,
    )
