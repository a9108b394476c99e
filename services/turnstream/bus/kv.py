"""Opening a KV bucket a service may be the first to need, and following one: every
change of its entries, handed on as it comes."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson
from nats.js.errors import BadRequestError

from turnstream.bus.appender import AppendError, Item, PipelinedAppender
from turnstream.bus.retry import cannot_place, retried, stoppable
from turnstream.bus.scan import subject_counts
from turnstream.bus.store import APPEND_TIMEOUT_S, WRONG_LAST_SEQUENCE

log = logging.getLogger("turnstream.bus")
RETRY_S = 0.5
CREATE = {"Nats-Expected-Last-Subject-Sequence": "0"}
"""A KV create: stored only if the key has no entry (what nats-py's `create` sends)."""


class KvWrites:
    """A bucket's keys written as its stream's subjects through a pipelined appender (the
    event store's: one reply subscription for every write; nats-py's `KeyValue` pays a
    request, a future and a decoded `PubAck` for each). Values are read with
    `KeyValue.get`."""

    def __init__(self, appender: PipelinedAppender, bucket: str) -> None:
        self.appender = appender
        self.prefix = f"$KV.{bucket}."

    async def create_all(self, entries: Sequence[tuple[str, bytes]]) -> bool:
        """Write each value whose key has never been written (`KeyValue.create`'s
        condition), in one flight; False when a key had been (the flight stops there: the
        keys after it may not be written)."""
        items = [(self.prefix + key, value, CREATE) for key, value in entries]
        try:
            await self.appender.publish(items, APPEND_TIMEOUT_S)
        except AppendError as exc:
            if exc.err_code in WRONG_LAST_SEQUENCE:
                return False
            raise
        return True

    async def create(self, key: str, value: bytes) -> bool:
        """`create_all` of one key."""
        return await self.create_all([(key, value)])

    async def put(self, key: str, value: bytes) -> None:
        await self.put_all([(key, value)])

    async def put_all(self, entries: Sequence[tuple[str, bytes]]) -> None:
        """Write each value over whatever its key holds, in order, in one flight."""
        items: list[Item] = [(self.prefix + key, value, {}) for key, value in entries]
        await self.appender.publish(items, APPEND_TIMEOUT_S)


PLACEMENT_WITHIN_S = 30.0


async def open_or_create(js: Any, config: Any) -> Any:
    """The bucket `config` (a `KeyValueConfig`) names: opened as it is when it exists (an
    older one keeps its settings), else created; another process creating it meanwhile
    is fine. A cluster that cannot place its replicas yet (a node still joining or
    restarting) is asked again for up to `PLACEMENT_WITHIN_S`."""
    deadline = asyncio.get_running_loop().time() + PLACEMENT_WITHIN_S
    while True:
        try:
            return await js.key_value(config.bucket)
        except Exception:  # BucketNotFoundError, or no permission to look it up
            pass
        try:
            return await js.create_key_value(config=config)
        except BadRequestError as exc:
            if not cannot_place(exc):
                return await js.key_value(config.bucket)  # created meanwhile, other settings
            if asyncio.get_running_loop().time() > deadline:
                raise
            log.warning("bucket %s cannot be placed yet (%s); asking again", config.bucket, exc)
            await asyncio.sleep(RETRY_S)


async def watch(
    open_kv: Callable[[], Awaitable[Any]],
    stop: asyncio.Event,
    on_entry: Callable[[Any], None],
    what: str,
    *,
    keys: str = ">",
) -> None:
    """Hand each entry of the bucket `open_kv()` opens whose key matches `keys` (its
    current values, then every change) to `on_entry` until `stop` is set. Opening it and
    following it are retried until they work (`bus.retry`, backing off): a service must
    outlive a bucket that does not answer for a while (a cluster electing a new leader, a
    reconnect)."""

    async def start() -> Any:
        return await (await open_kv()).watch(keys)

    anything = lambda _exc: True  # noqa: E731 (a bucket not there yet: the setup step comes)
    watcher = await stoppable(retried(f"the {what} watch", start, retry_on=anything), stop)
    if watcher is None:
        return
    try:
        await _follow(watcher, stop, on_entry, what)
    finally:
        try:
            await watcher.stop()
        except Exception as exc:  # the connection may be gone: nothing left to stop
            log.debug("%s watch did not stop cleanly: %s", what, exc)


async def _follow(
    watcher: Any, stop: asyncio.Event, on_entry: Callable[[Any], None], what: str
) -> None:
    while not stop.is_set():
        try:
            entry = await watcher.updates(timeout=RETRY_S)
        except Exception as exc:  # nats-py raises its own timeout type here
            if "timeout" not in type(exc).__name__.lower():
                log.warning("%s watch failed (%s); retrying", what, exc)
                await _sleep(stop, RETRY_S)
            continue
        if entry is not None:  # None: the end of the current values
            on_entry(entry)


async def _sleep(stop: asyncio.Event, seconds: float) -> None:
    """Wait `seconds`, or less if `stop` is set meanwhile."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stop.wait()


async def recent_values(
    nc: Any, bucket: str, want: Callable[[str, bytes], bool], limit: int
) -> tuple[list[tuple[str, bytes]], int]:
    """The `limit` keys of `bucket` changed last whose value `want(key, value)` takes, the
    latest first, and how many keys the bucket has; without a consumer. A bucket keeps
    one message per key, in the order they were last written, so the stream's tail is
    the keys changed last: it is read back from the end (each message by
    `next_by_subj` from a sequence, a window at a time, doubling), not key by key, so
    listing the newest of 100,000 costs about what listing the newest of 100 does."""
    stream, prefix = f"KV_{bucket}", f"$KV.{bucket}."
    info = orjson.loads((await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"")).data)
    state = info.get("state") or {}
    first, last = int(state.get("first_seq") or 0), int(state.get("last_seq") or 0)
    found: list[tuple[str, bytes]] = []
    seen: set[str] = set()
    window, upper = max(2 * limit, 32), last
    while upper >= first and len(found) < limit and upper > 0:
        lower = max(first, upper - window + 1)
        batch: list[tuple[str, bytes]] = []
        seq = lower
        while seq <= upper:
            reply = await nc.request(
                f"$JS.API.STREAM.MSG.GET.{stream}",
                orjson.dumps({"seq": seq, "next_by_subj": prefix + ">"}),
                timeout=5,
            )
            message = orjson.loads(reply.data).get("message")
            if not message or int(message["seq"]) > upper:
                break
            seq = int(message["seq"]) + 1
            data = base64.b64decode(message.get("data") or "")
            if data:  # a delete marker: the key has no value now
                batch.append((str(message["subject"]).removeprefix(prefix), data))
        for key, value in reversed(batch):  # the latest first
            if key not in seen and want(key, value):
                seen.add(key)
                found.append((key, value))
        upper, window = lower - 1, window * 2
    return found[:limit], int(state.get("num_subjects") or state.get("messages") or 0)


async def current_values(nc: Any, bucket: str, *, concurrency: int = 32) -> dict[str, bytes]:
    """Every key of `bucket` with a value now, without a consumer (a KV watch creates one,
    which no user but the setup operator may: ops/accounts.conf): the server lists the
    keys from its subject index, then each key's last message is asked for, a few at a
    time (the buckets allow no direct get). A deleted or purged key is left out."""
    stream, prefix = f"KV_{bucket}", f"$KV.{bucket}."
    keys = await subject_counts(nc, stream, prefix + ">")
    asking = asyncio.Semaphore(concurrency)

    async def last(subject: str) -> bytes:
        async with asyncio.timeout(RETRY_S * 20), asking:
            reply = await nc.request(
                f"$JS.API.STREAM.MSG.GET.{stream}",
                orjson.dumps({"last_by_subj": subject}),
                timeout=RETRY_S * 20,
            )
        message = orjson.loads(reply.data).get("message") or {}
        return base64.b64decode(message.get("data") or "")  # a delete marker: none

    values = await asyncio.gather(*(last(subject) for subject in keys))
    return {s.removeprefix(prefix): v for s, v in zip(keys, values, strict=True) if v}
