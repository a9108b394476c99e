"""Pages of one session's log by batched direct get (ADR-31): no consumer at all.

`$JS.API.DIRECT.GET.<log stream>` with `{"seq", "next_by_subj", "batch"}` answers with up
to `batch` messages of the subject from `seq` on, then an end-of-batch status (204) that
says how many more there are; 404 when there is none. The log stream allows direct gets
(`allow_direct`, bus/streams.py). Replays and `/events` pages use it, so a thousand
clients resuming at once cost the server no consumer state (an ordered consumer per
replay would linger until its inactivity threshold). Could move to `bus/`.
"""

from __future__ import annotations

import asyncio
from typing import Any, NamedTuple

import orjson

from turnstream.bus import Bus

TIMEOUT_S = 10.0
MAX_BATCH = 1000


class LogRecord(NamedTuple):
    seq: int
    event_type: str
    data: bytes


async def read_page(
    bus: Bus, session_id: str, *, after: int, limit: int
) -> tuple[list[LogRecord], int]:
    """Up to `limit` (≤ 1000) of the session's events after `after`, and how many more
    there were after them when the server answered."""
    nc = bus.nc
    inbox = nc.new_inbox()
    replies: asyncio.Queue[Any] = asyncio.Queue()
    sub = await nc.subscribe(inbox, cb=replies.put)
    request = {
        "seq": after + 1,
        "next_by_subj": bus.subjects.log_session(session_id),
        "batch": max(1, min(limit, MAX_BATCH)),
    }
    out: list[LogRecord] = []
    try:
        await nc.publish(
            f"$JS.API.DIRECT.GET.{bus.subjects.log_stream}", orjson.dumps(request), reply=inbox
        )
        async with asyncio.timeout(TIMEOUT_S):
            while True:
                msg = await replies.get()
                headers = msg.headers or {}
                status = headers.get("Status")
                if status == "404":
                    return out, 0
                if status is not None:
                    if status != "204":
                        raise RuntimeError(f"direct get of {session_id}: status {status}")
                    return out, int(headers.get("Nats-Num-Pending", 0))
                subject = headers["Nats-Subject"]
                seq = int(headers["Nats-Sequence"])
                out.append(LogRecord(seq, subject[subject.rindex(".") + 1 :], msg.data))
    finally:
        await sub.unsubscribe()
