"""Idempotency keys, remembered durably: one `(sessionId, idempotencyKey)` starts one turn.

JetStream's own dedup (`Nats-Msg-Id` on the inbound stream) only covers an identical
publish inside the stream's duplicate window (`TURNSTREAM_DUPLICATE_WINDOW_S`, 120 s). A
sender that retries later, or with another `Nats-Msg-Id`, would start a second turn. So
the gateway claims every accepted command's key in the `<prefix>_idempotency` KV bucket
(create-if-absent, the value is the inbound sequence that claimed it) before it appends
anything: a command whose key another inbound message already claimed is acked and
dropped; its sender hears back from the first one's events, whose `correlationId` is
that key.

A batch's claims go out together (`first_times`): pipelined create-if-absent writes, one
flight for the whole batch and no KV client round trip per message; only when one of them
finds its key taken are they settled one by one (`first_time`: the same message
redelivered finds its own claim, another message's claim means a duplicate).

How long a key is remembered: as long as the raw inbound commands are kept
(`TURNSTREAM_INBOUND_MAX_AGE_DAYS`, 7 days by default; 0 keeps both forever). The bucket's
TTL is set when the setup step first creates it (`turnstream.bus.streams.bucket_configs`).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import Any

from turnstream.bus.errors import KeyChanged, KeyMissing
from turnstream.bus.kv import KvWrites
from turnstream.core.subjects import session_key

log = logging.getLogger("turnstream.gateway")
Claim = tuple[str, str, int]
"""session id, idempotency key, the inbound sequence claiming them"""


def claim_key(session_id: str, idempotency_key: str) -> str:
    """The KV key of a pair: a key may hold any characters, a KV key only a few."""
    digest = hashlib.sha256(idempotency_key.encode()).hexdigest()[:40]
    return f"{session_key(session_id)}.{digest}"


async def first_times(writes: KvWrites, kv: Any, claims: Sequence[Claim]) -> list[bool]:
    """`first_time` for each claim in the bucket `kv` (`writes` writes it), in one
    pipelined flight while none was taken before."""
    if not claims:
        return []
    entries = [(claim_key(session, key), str(seq).encode()) for session, key, seq in claims]
    if await writes.create_all(entries):
        return [True] * len(claims)
    # a key was taken (a duplicate, or this batch redelivered): each claim asked again
    return [await first_time(kv, *claim) for claim in claims]


async def first_time(kv: Any, session_id: str, idempotency_key: str, seq: int) -> bool:
    """Claim the pair for inbound message `seq`; False when another message claimed it.

    The same message redelivered (the gateway stopped between claim and append) finds
    its own claim and goes on: its events have derived ids, so appending them twice is
    a no-op."""
    key = claim_key(session_id, idempotency_key)
    mine = str(seq).encode()
    for _ in range(3):  # a claim that expires between `create` and `get` is claimed again
        try:
            await kv.create(key, mine)
            return True
        except KeyChanged:
            try:
                entry = await kv.get(key)
            except KeyMissing:
                continue
        if entry.value is None:  # nats-py's expired entry (DESIGN §9)
            continue
        if entry.value == mine:
            return True
        log.info(
            "duplicate idempotencyKey %r in session %s (inbound seq %d; first at seq %s): dropped",
            idempotency_key,
            session_id,
            seq,
            entry.value.decode(),
        )
        return False
    raise RuntimeError(f"could not claim idempotency key {key} (it keeps expiring)")
