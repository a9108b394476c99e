"""Durable consumers (push and pull), the fetch loop, in-progress acks and dead letters:
how the services take their work from the streams."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Any

from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import api

from turnstream.bus.durables import Durable, bound_config, define_durable
from turnstream.bus.streams import dead_letter_subject
from turnstream.core.events import decode
from turnstream.core.subjects import Subjects

log = logging.getLogger("turnstream.bus")
BATCH = 256
DEAD_LETTER_TIMEOUT_S = 5.0
POISON_DELIVERIES = 5
"""A message whose handling raised this many times is dead-lettered and terminated; one
that cannot even be decoded goes at its first delivery."""


async def define_pull(
    js: Any,
    stream: str,
    durable: str,
    subjects: Sequence[str],
    *,
    ack_wait_s: float = 60,
    max_ack_pending: int = 20_000,
    ack_all: bool = False,
    start_seq: int | None = None,
) -> None:
    """Create or update a shared durable pull consumer (`define_durable`: a push one of an
    older version is replaced after its ack floor). `ack_all`: one ack covers every earlier
    message (a single in-order reader that acks once per batch). `start_seq`: where one
    created now starts."""
    config = api.ConsumerConfig(
        durable_name=durable,
        filter_subjects=list(subjects),
        ack_policy=api.AckPolicy.ALL if ack_all else api.AckPolicy.EXPLICIT,
        ack_wait=ack_wait_s,
        max_ack_pending=max_ack_pending,
    )
    if start_seq is not None:
        config.deliver_policy = api.DeliverPolicy.BY_START_SEQUENCE
        config.opt_start_seq = start_seq
    await define_durable(js, stream, config)


def pull_next_subject(stream: str, durable: str) -> str:
    """Where a pull request for the next messages of `durable` on `stream` goes."""
    return f"{api.DEFAULT_PREFIX}.CONSUMER.MSG.NEXT.{stream}.{durable}"


async def durable_pull(js: Any, stream: str, durable: str, subjects: Sequence[str]) -> Any:
    """A shared durable pull consumer, bound. Every instance of a service binds to the same
    durable, so adding instances shares the work."""
    await define_pull(js, stream, durable, subjects)
    return await js.pull_subscribe_bind(durable, stream=stream)


async def fetch_loop(
    sub: Any,
    stop: asyncio.Event,
    on_batch: Callable[[list[Any]], Awaitable[None]],
    *,
    batch: int = BATCH,
    ready: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Fetch until `stop` is set; a fetch that fails (a reconnect) is retried. `ready`, if
    given, is awaited before each fetch (a consumer with nothing to do fetches nothing)."""
    try:
        while not stop.is_set():
            if ready is not None:
                await ready()
                if stop.is_set():
                    break
            try:
                msgs = await sub.fetch(batch, timeout=0.5)
            except (TimeoutError, NatsTimeoutError):
                continue
            except NatsError as exc:  # disconnected: nats-py reconnects, we retry
                log.warning("fetch failed (%s); retrying", exc)
                await asyncio.sleep(0.5)
                continue
            await on_batch(msgs)
    finally:
        await sub.unsubscribe()


def _undecodable(data: bytes) -> bool:
    try:
        decode(data)
    except Exception:
        return True
    return False


async def _on_failure(js: Any, msg: Any, exc: Exception, dead: str) -> None:
    """A consumer's handler raised. A message that cannot be decoded, or that failed
    `POISON_DELIVERIES` times, is copied to the dead-letter stream (with why) and
    terminated so the consumer goes on; any other is left to be redelivered. Not a
    `max_deliver` on the consumers: the turn-runner naks facts of sessions another runner
    holds, legitimately, many times over."""
    try:
        delivered = int(msg.metadata.num_delivered)
        seq, subject = msg.metadata.sequence.stream, msg.subject
    except Exception:  # not even JetStream metadata: nothing to settle
        log.exception("handler failed on a message without JetStream metadata")
        return
    undecodable = _undecodable(msg.data)
    if not undecodable and delivered < POISON_DELIVERIES:
        log.warning("seq %d (%s) failed on delivery %d: %r", seq, subject, delivered, exc)
        return
    why = "undecodable" if undecodable else f"failed {delivered} deliveries"
    stream = msg.metadata.stream
    headers = {
        "Nats-Msg-Id": f"dead:{stream}:{seq}:{dead}",
        "Ts-Dead-Stream": stream,
        "Ts-Dead-Subject": subject,
        "Ts-Dead-Seq": str(seq),
        "Ts-Dead-Reason": why,
        "Ts-Dead-Error": f"{type(exc).__name__}: {exc}"[:1000],
    }
    try:
        await js.publish(dead, msg.data, headers=headers, timeout=DEAD_LETTER_TIMEOUT_S)
        await msg.term()
    except Exception as publish_exc:  # the broker away: it comes again, and so do we
        log.warning("could not dead-letter seq %d: %r", seq, publish_exc)
        return
    log.error(
        "seq %d (%s) %s: dead-lettered to %s and terminated: %r", seq, subject, why, dead, exc
    )


async def durable_push(
    js: Any,
    stream: str,
    durable: str,
    deliver_subject: str,
    subjects: Sequence[str],
    on_msg: Callable[[Any], Awaitable[None]],
    *,
    ack_wait_s: float = 60,
    max_ack_pending: int = 20_000,
    ack_all: bool = False,
    start_seq: int | None = None,
) -> Any:
    """Create or update a shared durable push consumer (a deliver group) and subscribe: a
    consumer of its own (tests, benchmarks); a service binds to the one the setup step made
    (`log_push`, `bind_push`).

    A push consumer hands each message over as soon as it is stored: a pull `fetch` costs
    a request (and, when idle, a no-wait probe) per wake-up, ~0.3 ms more per hop here
    (bench/consumers.py). Instances of a service join the same deliver group and share the
    work. `ack_all`: one ack covers every earlier message. `start_seq`: where a consumer
    created now starts (one that exists goes on as it was).
    """
    config = api.ConsumerConfig(
        durable_name=durable,
        deliver_subject=deliver_subject,
        deliver_group=durable,
        filter_subjects=list(subjects),
        ack_policy=api.AckPolicy.ALL if ack_all else api.AckPolicy.EXPLICIT,
        ack_wait=ack_wait_s,
        max_ack_pending=max_ack_pending,
    )
    if start_seq is not None:
        config.deliver_policy = api.DeliverPolicy.BY_START_SEQUENCE
        config.opt_start_seq = start_seq
    await define_durable(js, stream, config)
    prefix = deliver_subject.split(".deliver.", 1)[0]
    dead = dead_letter_subject(prefix, stream, durable)
    return await _subscribe(js, stream, config, dead, on_msg)


async def bind_push(
    js: Any,
    subjects: Subjects,
    durable: Durable,
    stream: str,
    partition: int | None,
    on_msg: Callable[[Any], Awaitable[None]],
) -> Any:
    """Subscribe to the push durable `durable` the setup step made on `stream` (its deliver
    group: every instance of the service shares the work); `DurableMissing` if there is none.
    A message whose handling keeps failing is dead-lettered (`_on_failure`)."""
    config = await bound_config(js, subjects, durable, stream, partition)
    dead = dead_letter_subject(subjects.prefix, stream, durable.name)
    return await _subscribe(js, stream, config, dead, on_msg)


async def _subscribe(
    js: Any,
    stream: str,
    config: api.ConsumerConfig,
    dead: str,
    on_msg: Callable[[Any], Awaitable[None]],
) -> Any:
    async def guarded(msg: Any) -> None:
        try:
            await on_msg(msg)
        except Exception as exc:
            await _on_failure(js, msg, exc, dead)

    return await js.subscribe_bind(
        stream=stream,
        config=config,
        consumer=config.durable_name,
        cb=guarded,
        manual_ack=True,
        pending_msgs_limit=(config.max_ack_pending or 20_000) + 1000,
        pending_bytes_limit=1024 * 1024 * 1024,
    )


class Subscriptions(list[Any]):
    """Subscriptions let go together (a consumer's on each log stream)."""

    async def unsubscribe(self) -> None:
        for sub in self:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()


async def log_push(
    js: Any,
    subjects: Subjects,
    durable: Durable,
    on_msg: Callable[[Any], Awaitable[None]],
    *,
    partitions: Iterable[int] | None = None,
) -> Subscriptions:
    """`bind_push` to the log durable `durable`: on `TS_LOG`, or on each partition stream
    `TS_LOG_<k>` (the same durable name on each, delivering to
    `<prefix>.deliver.<durable>.<k>`) of `partitions`, default all of them."""
    subs = Subscriptions()
    try:
        for k in range(subjects.log_partitions) if partitions is None else partitions:
            stream = subjects.log_stream_at(k)
            subs.append(await bind_push(js, subjects, durable, stream, k, on_msg))
    except BaseException:
        await subs.unsubscribe()
        raise
    return subs


class InProgress:
    """In-progress acks for `msgs`, three per ack wait, until `stop`: so a consumer can have
    a short ack wait (a holder that dies has its messages redelivered soon) while one that
    is merely slow keeps them. Timers, not a task: most messages are handled within
    milliseconds and never beat."""

    __slots__ = ("every", "handle", "msgs")

    def __init__(self, msgs: Sequence[Any], ack_wait_s: float) -> None:
        self.msgs, self.every = msgs, ack_wait_s / 3
        self.handle = asyncio.get_running_loop().call_later(self.every, self._beat)

    def _beat(self) -> None:
        for msg in self.msgs:
            beat(msg)
        self.handle = asyncio.get_running_loop().call_later(self.every, self._beat)

    def stop(self) -> None:
        self.handle.cancel()


def beat(msg: Any) -> None:
    """One in-progress ack for `msg`, not awaited; a failure is logged (the message is
    then redelivered, as it would be anyway)."""
    asyncio.ensure_future(msg.in_progress()).add_done_callback(_beat_failed)


def _beat_failed(done: asyncio.Future[Any]) -> None:
    if not done.cancelled() and done.exception() is not None:  # disconnected: redelivered
        log.warning("in-progress ack failed: %s", done.exception())


@contextlib.contextmanager
def kept_in_progress(msgs: Sequence[Any], ack_wait_s: float) -> Iterator[None]:
    """`InProgress` for the duration of the block."""
    beating = InProgress(msgs, ack_wait_s)
    try:
        yield
    finally:
        beating.stop()
