"""Questions about the whole log that must not cost a list of it.

`scan_log` reads it once, fast, folding as it arrives (rebuilds, the audit service's
start): an ordered push consumer with a callback (its rate: `bench/audit.py`). Unlike
`EventStore.read_all` nothing is kept: each event's sequence, subject and bytes go to
`on_event`. `subject_counts` asks the server how many messages each subject holds, and
reads none. `stream_seq` is the cheap sequence of a delivered message.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

import orjson
from nats.js import api
from nats.js.errors import APIError

from turnstream.bus.ordered import ordered_subscribe
from turnstream.core.subjects import Subjects

IDLE_TIMEOUT_S = 30.0
"""A scan that receives nothing for this long fails (a whole scan may take far longer)."""
API_TIMEOUT_S = 5.0
"""A JetStream API request's answer is awaited this long (the nats client's default)."""


def stream_seq(msg: Any) -> int:
    """The stream sequence of a JetStream message, read from its ack subject.

    `msg.metadata` builds several objects and a datetime per message, a cost a scan pays
    100,000 times; the sequence is one token of `$JS.ACK.<stream>.<consumer>.<delivered>.
    <stream seq>…` (or of the 12-token form with domain and account hash).
    """
    tokens = msg.reply.split(".")
    if len(tokens) == 9:
        return int(tokens[5])
    if len(tokens) >= 11:
        return int(tokens[7])
    return int(msg.metadata.sequence.stream)


def one_log_stream(subjects: Subjects, stream: str | None) -> str:
    """`stream`, or the log's one stream. A partitioned log has no default: sequences are
    per partition, and a question about the whole log asked of one partition would get a
    wrong answer silently, so its reader names the partition (`Subjects.log_stream_of`)."""
    if stream is not None:
        return stream
    if subjects.partitioned:
        raise ValueError(
            f"the log is {subjects.log_partitions} streams: name the one to read "
            "(Subjects.log_stream_of(session) or .log_stream_at(k))"
        )
    return subjects.log_stream


async def log_last_seq(
    js: Any, subjects: Subjects, subject: str | None = None, *, stream: str | None = None
) -> int:
    """Sequence of the last event in the log stream `stream` (on `subject`, say a
    session's); 0 for none. `stream` may be left out when the log is one stream."""
    stream = one_log_stream(subjects, stream)
    return await last_seq_of(js._nc, stream, subject or subjects.log_all)


async def last_seq_of(nc: Any, stream: str, subject: str) -> int:
    """The sequence of the last message of `stream` on `subject`, asked of its leader; 0
    when there is none. Only the sequence is read from the answer (the client's
    `get_last_msg` decodes the message and parses its headers as MIME: a fifth of a
    millisecond a session's reload spent for nothing); any other error is raised as the
    client raises it."""
    reply = await nc.request(
        f"$JS.API.STREAM.MSG.GET.{stream}",
        orjson.dumps({"last_by_subj": subject}),
        timeout=API_TIMEOUT_S,
    )
    answer = orjson.loads(reply.data)
    error = answer.get("error")
    if error is None:
        return int(answer["message"]["seq"])
    if error.get("code") == 404:
        return 0
    raise APIError.from_error(error)


async def log_count(js: Any, subjects: Subjects, subject: str, *, stream: str) -> int:
    """How many messages the log stream `stream` has on `subject` (a session's: one count
    per event kind, summed), asked of the stream's leader (`subject_counts`)."""
    return sum((await subject_counts(js._nc, stream, subject)).values())


async def scan_log(
    js: Any,
    subjects: Subjects,
    on_event: Callable[[int, str, bytes], None],
    *,
    after_seq: int = 0,
    subject: str | None = None,
    stream: str | None = None,
    until_seq: int | None = None,
    at_least: int = 0,
) -> int:
    """Hand every event of the log stream `stream` after `after_seq` (on `subject`,
    default all of it), up to the last one now (or up to `until_seq`), to
    `on_event(seq, subject, data)` in order; return the last sequence handed over
    (`after_seq` when there was none). `stream` may be left out when the log is one
    stream. `at_least`: a sequence on `subject` the caller knows exists; the scan goes up
    to it even if the server asked for the last one answers with less (a leader paused,
    and not yet aware it is not the leader any more), or fails (`TimeoutError`)."""
    subject = subject or subjects.log_all
    stream = one_log_stream(subjects, stream)
    last = max(await log_last_seq(js, subjects, subject, stream=stream), at_least)
    if until_seq is not None:
        last = min(last, until_seq)  # a message at or past it exists: the scan ends there
    if last <= after_seq:
        return after_seq
    handover = _Handover(on_event, after_seq, last)
    config = api.ConsumerConfig(
        deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=after_seq + 1
    )
    sub = await ordered_subscribe(
        js,
        subject,
        stream=stream,
        cb=handover.on_msg,
        config=config,
        pending_msgs_limit=1_000_000,
        pending_bytes_limit=1024 * 1024 * 1024,
    )
    try:
        await handover.finished()
    finally:
        await sub.unsubscribe()
    return handover.handed


class _Handover:
    """A scan's delivery callback: each event up to `last` handed to `on_event` in order,
    the scan done at `last` (or at the first error `on_event` raises)."""

    def __init__(self, on_event: Callable[[int, str, bytes], None], after: int, last: int):
        self.on_event, self.last = on_event, last
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.progress = 0
        self.handed = after
        """The last sequence handed over."""

    async def on_msg(self, msg: Any) -> None:
        seq = stream_seq(msg)
        self.progress = seq
        done = self.done
        if done.done():
            return
        if seq > self.last:
            done.set_result(None)
            return
        try:
            self.on_event(seq, msg.subject, msg.data)
        except Exception as exc:  # stop the scan; the caller sees why
            done.set_exception(exc)
            return
        self.handed = seq
        if seq == self.last:
            done.set_result(None)

    async def finished(self) -> None:
        """Until the scan is done; a `TimeoutError` when nothing comes for a while."""
        while not self.done.done():
            seen = self.progress
            await asyncio.wait([self.done], timeout=IDLE_TIMEOUT_S)
            if not self.done.done() and self.progress == seen:
                raise TimeoutError(f"log scan stalled at seq {seen} of {self.last}")
        self.done.result()


DIRECT_BATCH = 500
"""Messages per batched direct get (nats-server 2.11+, a stream with `allow_direct`)."""


DIRECT_TIMEOUT_S = 5.0
"""A direct get answered by nothing this long is given up (the caller may read otherwise)."""


class DirectGetError(Exception):
    """A direct get was answered with an error status."""


class DirectReads:
    """Batched direct gets for a whole process (the event store's session reads, the HTTP
    face's pages): one wildcard inbox subscription, made on first use, routes each reply
    to its request by the last token of its subject, so a read costs no subscription of
    its own (a SUB, an UNSUB and a task each) and the server no consumer.

    The server answers `$JS.API.DIRECT.GET.<stream>` with up to `batch` messages and an
    end-of-batch status (204, with how many remain), or 404 when there is nothing. Each
    reply is awaited at most `DIRECT_TIMEOUT_S` (then `TimeoutError`); any other status is
    a `DirectGetError`. Replies are queued by the callback and awaited under
    `asyncio.timeout`, never with `Subscription.next_msg`: on Python 3.11 that returns a
    reply that came as the read was cancelled instead of raising `CancelledError`, and a
    runner's session worker cancelled at shutdown then lived on."""

    def __init__(self, nc: Any) -> None:
        self.nc = nc
        self.prefix: str | None = None
        self.waiting: dict[str, asyncio.Queue[Any]] = {}
        self._sub: Any = None
        self._ids = itertools.count()
        self._starting = asyncio.Lock()

    async def batch(
        self,
        stream: str,
        subject: str,
        on_event: Callable[[int, str, bytes], None],
        *,
        after_seq: int,
        batch: int,
    ) -> int:
        """One batch of `subject`'s messages (wildcards allowed) after `after_seq`, each
        handed to `on_event(seq, subject, data)` in order; how many more there were."""
        prefix = self.prefix or await self._subscribe()
        token = str(next(self._ids))
        replies = self.waiting[token] = asyncio.Queue()
        try:
            await self.nc.publish(
                f"$JS.API.DIRECT.GET.{stream}",
                direct_request(subject, after_seq, batch),
                reply=f"{prefix}.{token}",
            )
            return await direct_batch(replies, on_event, f"{stream} {subject}")
        finally:
            del self.waiting[token]

    async def read(
        self,
        stream: str,
        subject: str,
        on_event: Callable[[int, str, bytes], None],
        *,
        after_seq: int = 0,
        batch: int = DIRECT_BATCH,
        count: int | None = None,
    ) -> int:
        """Every message on `subject` after `after_seq`, batch after batch, to the end the
        answering server knows of; the last sequence handed over (`after_seq` if none).

        A batch asking for more messages than remain costs the server the rest of the
        stream (nats-server 2.15.1 looks on to its end to fill it: 7.5 ms for a 4-event
        session early in a 160,000-event log, 0.3 ms asked for exactly 4;
        bench/session_reads.py). Where the count is known (`count`: how many there are
        after `after_seq`), each batch asks for no more than remain, and the read ends
        with the last of them (one appended since is the caller's to look for)."""
        last, left = after_seq, count

        def handed(seq: int, subject_: str, data: bytes) -> None:
            nonlocal last, left
            on_event(seq, subject_, data)
            last = seq
            if left is not None:
                left -= 1

        while left is None or left > 0:
            size = batch if left is None else min(batch, left)
            if not await self.batch(stream, subject, handed, after_seq=last, batch=size):
                break
        return last

    async def _subscribe(self) -> str:
        async with self._starting:
            if self.prefix is None:
                prefix = self.nc.new_inbox()
                self._sub = await self.nc.subscribe(prefix + ".*", cb=self._arrived)
                self.prefix = prefix
        return self.prefix

    async def close(self) -> None:
        """Unsubscribe (a later read subscribes again)."""
        if self._sub is not None:
            sub, self._sub, self.prefix = self._sub, None, None
            await sub.unsubscribe()

    async def _arrived(self, msg: Any) -> None:
        replies = self.waiting.get(msg.subject.rsplit(".", 1)[1])
        if replies is not None:  # else a read given up (a late reply)
            replies.put_nowait(msg)


def direct_request(subject: str, after_seq: int, batch: int) -> bytes:
    """The body of a batched direct get of `subject`'s messages after `after_seq`."""
    return orjson.dumps({"seq": after_seq + 1, "next_by_subj": subject, "batch": batch})


async def direct_batch(
    replies: asyncio.Queue[Any], on_event: Callable[[int, str, bytes], None], what: str
) -> int:
    """Read one batch of direct-get replies from `replies`, handing each message to
    `on_event(seq, subject, data)`; return how many messages remain after it (0 when
    there were none at all). Each reply is awaited at most `DIRECT_TIMEOUT_S`."""
    while True:
        async with asyncio.timeout(DIRECT_TIMEOUT_S):
            msg = await replies.get()
        headers = msg.headers or {}
        status = headers.get("Status")
        if status is None:
            on_event(int(headers["Nats-Sequence"]), headers.get("Nats-Subject", ""), msg.data)
            continue
        if status == "404":
            return 0
        if status == "204":  # end of this batch
            return int(headers.get("Nats-Num-Pending", "0") or 0)
        raise DirectGetError(f"direct get on {what}: {status} {headers.get('Description')}")


async def subject_counts(nc: Any, stream: str, subjects_filter: str) -> dict[str, int]:
    """How many messages each subject matching `subjects_filter` has in `stream`.

    The server answers from its own index of subjects, reading no message: a question
    about every session costs per session, not per event. Large answers come in pages.
    """
    counts: dict[str, int] = {}
    while True:
        request = {"subjects_filter": subjects_filter, "offset": len(counts)}
        reply = await nc.request(
            f"$JS.API.STREAM.INFO.{stream}", orjson.dumps(request), timeout=IDLE_TIMEOUT_S
        )
        info = orjson.loads(reply.data)
        if "error" in info:
            raise RuntimeError(f"stream info of {stream}: {info['error']}")
        page = (info.get("state") or {}).get("subjects") or {}
        counts.update(page)
        if not page or len(counts) >= int(info.get("total", 0)):
            return counts


OPENS_CLOSES = (
    ("SessionTurnStart", "SessionTurnEnd"),
    ("WorkflowAttached", "WorkflowExit"),
    ("SubTurnSpawned", "SubTurnResultDelivered"),
)
"""Each opening event gets exactly one closing one: more openings than closings is open work
(a turn, a workflow run, a child's result still to deliver)."""


async def open_sessions(nc: Any, subjects: Subjects, stream: str | None = None) -> set[str]:
    """Sessions with a turn or a workflow run not ended, however old: counted per subject
    by the server, no event read. In the log stream `stream` only, if given; else in every
    one (a session's events are all in one partition)."""
    found: set[str] = set()
    for name in subjects.log_streams if stream is None else [stream]:
        found |= await _open_in(nc, subjects, name)
    return found


async def _open_in(nc: Any, subjects: Subjects, stream: str) -> set[str]:
    found: set[str] = set()
    for opened, closed in OPENS_CLOSES:
        starts = await subject_counts(nc, stream, subjects.log_kind(opened))
        ends = await subject_counts(nc, stream, subjects.log_kind(closed))
        ended = {subjects.session_from_log(s): n for s, n in ends.items()}
        found |= {
            session
            for session, n in ((subjects.session_from_log(s), n) for s, n in starts.items())
            if n > ended.get(session, 0)
        }
    return found
