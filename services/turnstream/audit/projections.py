"""Session summaries in the `ts_sessions` bucket: write them, read them back."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from turnstream.bus.errors import KeyChanged, KeyMissing
from turnstream.bus.kv import KvWrites
from turnstream.core.subjects import is_session_id, session_key
from turnstream.core.summary import SessionSummary

log = logging.getLogger("turnstream.audit")
CHUNK = 512
"""KV writes in flight at once."""


def _writable(summaries: Sequence[SessionSummary]) -> list[SessionSummary]:
    """Summaries of valid session ids, whose keys the bucket accepts (an event appended
    around the gateway may carry any session id; retrying its write would stop the audit)."""
    ok = [s for s in summaries if is_session_id(s.session_id)]
    for skipped in {s.session_id for s in summaries} - {s.session_id for s in ok}:
        log.error("session id %r cannot be a KV key; its summary is not written", skipped)
    return ok


async def put_all(writes: KvWrites, summaries: Sequence[SessionSummary]) -> None:
    """Write each summary (the audit service: the one live writer, in log order), a chunk
    in one flight (one reply subscription for the acks: no request, task and decoded ack
    each)."""
    payloads = [(session_key(s.session_id), s.to_json()) for s in _writable(summaries)]
    for start in range(0, len(payloads), CHUNK):
        await writes.put_all(payloads[start : start + CHUNK])


async def put_newer(kv: Any, summaries: Sequence[SessionSummary]) -> int:
    """Write each summary unless the bucket already has one as new (a rebuild that runs
    next to the live service must not put an older summary over a newer one)."""
    written = 0
    summaries = _writable(summaries)
    for start in range(0, len(summaries), CHUNK):
        chunk = summaries[start : start + CHUNK]
        written += sum(await asyncio.gather(*(_put_if_newer(kv, s) for s in chunk)))
    return written


async def _put_if_newer(kv: Any, summary: SessionSummary) -> bool:
    key, value = session_key(summary.session_id), summary.to_json()
    while True:
        current = await read_summary(kv, key)
        try:
            if current is None:
                await kv.create(key, value)
                return True
            stored, revision = current
            if stored is not None and stored.last_seq >= summary.last_seq:
                return False
            await kv.update(key, value, last=revision)
            return True
        except KeyChanged:
            continue  # written meanwhile: look again


async def read_summary(kv: Any, key: str) -> tuple[SessionSummary | None, int] | None:
    """The summary at `key` and its revision; None when there is none, `(None, revision)`
    when it cannot be read (whoever writes next overwrites it)."""
    try:
        entry = await kv.get(key)
    except KeyMissing:
        return None
    if entry.value is None:  # nats-py: a TTL-expired key may come back without a value
        return None
    try:
        return SessionSummary.from_json(entry.value), entry.revision
    except (ValueError, TypeError):
        return None, entry.revision  # unreadable: overwrite it


async def read_all(kv: Any) -> list[SessionSummary]:
    """Every summary in the bucket, by session id."""
    watcher = await kv.watchall()
    out: list[SessionSummary] = []
    try:
        while True:
            entry = await watcher.updates(timeout=5)
            if entry is None:
                break  # the end of the current values
            if entry.operation in ("DEL", "PURGE") or not entry.value:
                continue
            try:
                out.append(SessionSummary.from_json(entry.value))
            except (ValueError, TypeError):
                log.warning("ignoring an unreadable summary under %s", entry.key)
    finally:
        await watcher.stop()
    return sorted(out, key=lambda s: s.session_id)
