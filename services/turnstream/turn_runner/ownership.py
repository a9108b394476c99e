"""Which turn-runner acts for a session, chosen in one place: `SessionOwnership`.

    log of one stream (N = 1)    SessionLeases (`runtime/leased.py`): a lease per session
                                 (`session.<key>`); every runner consumes the one stream,
                                 a fact for a session leased elsewhere is nak'd for
                                 `lease_retry_s` (a bounce)
    partitioned log (N > 1)      PartitionSessions: a runner holds whole log partitions
                                 (`turn-runner.part.<k>`, `runtime/partitions.py`), binds
                                 the `turn-runner` consumer of those alone and acts for
                                 their sessions; no per-session lease, no bounce

With one partition, partition ownership would leave a single runner active: the
per-session leases stay there. Either way the log fence (the append conditional on the
session's last sequence) stops a stale holder.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

from turnstream.bus import Bus
from turnstream.bus.consume import Subscriptions
from turnstream.bus.durables import Durable
from turnstream.bus.errors import NotFound
from turnstream.bus.leases import LeaseTable, Ownership
from turnstream.bus.retry import retried, stoppable
from turnstream.bus.scan import open_sessions
from turnstream.bus.streams import StreamsMissing
from turnstream.core.events import decode
from turnstream.runtime.leased import Served, SessionLease, SessionLeases
from turnstream.runtime.leasing import LeasePolicy
from turnstream.runtime.mailbox import Delivered, Mailboxes
from turnstream.runtime.partitions import PartitionOwner
from turnstream.turn_runner.items import Item

log = logging.getLogger("turnstream.turn_runner")
SERVICE = "turn-runner"
"""The partition leases' service name: `turn-runner.part.<k>`, `turn-runner.member.<id>`."""
UNACKED_SCAN_MAX = 100_000
"""The most log messages read to find the sessions of facts a consumer has not had acked
(past it, those sessions wait for their facts' redelivery, `ACK_WAIT_S`)."""
KNOWN_SESSIONS = 100_000
"""Sessions whose take-over generation is remembered at most (those of actors let go are
forgotten at once; one forgotten with its actor alive is reloaded once)."""
DRAIN_S = 1.0
"""At a stop, how long the actors may take to hand back (nak) the facts they still hold."""
FULL_CHECK_S = 5.0
"""How long the check whether the log is full at start may take (`_full_at_start`)."""


class SessionOwnership(SessionLease, Protocol):
    """Which sessions this runner acts for (`SessionLease`), and how it serves them."""

    async def confirm(self, session_id: str) -> bool:
        """Ask the bucket, not our clock, whether the session is still ours."""
        ...

    def forget(self, session_id: str) -> None:
        """The session's actor is gone: what was kept for it goes too (a new actor reloads)."""
        ...

    async def serve(self, served: Served[Item], stop: asyncio.Event) -> None:
        """Consume into the mailboxes and keep what is owned until `stop`; then hand over."""
        ...


async def wake_open(bus: Bus, wake: Callable[[str], None], stream: str | None = None) -> None:
    """Wake every session with a turn or a workflow run not ended (in `stream` only, if
    given), however old (the deployment may have been down for long): each reloads and
    goes on from its last durable stage; a turn past its wall-time bound ends then."""
    opened = await open_sessions(bus.nc, bus.subjects, stream)
    if opened:
        log.info("resuming %d session(s) with an open turn", len(opened))
    for session_id in opened:
        wake(session_id)


async def wake_unacked(
    bus: Bus,
    wake: Callable[[str], None],
    durable: Durable,
    stream: str | None = None,
) -> None:
    """Wake every session with a fact (of what the consumer `durable` takes) it
    delivered and has not had acked, in `stream` (default the log's one): a dead
    runner's, which the consumer redelivers only after `ACK_WAIT_S`. Woken, each reloads
    the log, that fact included, and goes on now (its redelivery later is folded
    already). This finds what `wake_open` cannot: an input accepted whose turn had not
    started. (Facts in the window that were acked out of order wake their session too:
    one reload each.)"""
    stream = stream or bus.subjects.log_stream
    try:
        info = await bus.consumer_info(stream, durable.name)
    except NotFound:  # no setup step yet: binding the consumer says so
        return
    if not info.num_ack_pending:
        return
    floor = info.ack_floor.stream_seq if info.ack_floor else 0
    delivered = info.delivered.stream_seq if info.delivered else floor  # a server fills it
    until = min(delivered, floor + UNACKED_SCAN_MAX)
    found: set[str] = set()
    subjects, taken = bus.subjects, frozenset(durable.kinds or ())

    def on_event(_seq: int, subject: str, _data: bytes) -> None:
        if subjects.type_from_log(subject) in taken:
            found.add(subjects.session_from_log(subject))

    await bus.store.scan(on_event, after_seq=floor, stream=stream, until_seq=until)
    if found:
        log.info("waking %d session(s) with a fact not acked yet", len(found))
    for session_id in found:
        wake(session_id)


async def _full_at_start(bus: Bus, stream: str | None) -> None:
    """Arm the process's storage alarm when the log is at its limit before anything is
    woken: a turn resumed now then ends `storage_full` at once, as it would have at its
    next append, instead of calling the model again for an answer the log cannot take
    (`SessionActor.step`). Not known (NATS slow): the first append refused says it."""
    streams = [stream] if stream else bus.subjects.log_streams
    try:
        async with asyncio.timeout(FULL_CHECK_S):
            await bus.noted_at_limit(streams, bus.subjects.log_all)
    except Exception as exc:
        log.debug("the log's storage not checked at start: %r", exc)


async def wake_waiting(
    served: Served[Item], stop: asyncio.Event, stream: str | None = None
) -> None:
    """Wake every session waiting on the runner that takes it (in `stream` only, if
    given): open work (`wake_open`) and facts delivered and not acked (`wake_unacked`).
    Each is asked again while NATS does not answer (`bus.retry`), until `stop`: a runner
    never ends because its resume found NATS slow (waking a session twice costs a reload)."""
    bus, wake, where = served.bus, served.wake, stream or "the log"
    await _full_at_start(bus, stream)
    opened = retried(f"the open sessions of {where}", lambda: wake_open(bus, wake, stream))
    await stoppable(opened, stop)
    if stop.is_set():
        return
    unacked = lambda: wake_unacked(bus, wake, served.consumer, stream)  # noqa: E731
    await stoppable(retried(f"the facts not acked on {where}", unacked), stop)


class PartitionSessions:
    """Whole log partitions (`runtime/partitions.PartitionOwner`): the sessions of the
    partitions held are acted for here, the others never reach this runner."""

    retry_s = 0.0
    """A fact of a partition let go is nak'd for its new holder to take at once."""

    def __init__(self, bus: Bus, policy: LeasePolicy, owner: str) -> None:
        self.subjects = bus.subjects
        self.owner = owner
        self.partitions = PartitionOwner(bus, SERVICE, policy, owner, self.subjects.log_partitions)
        self.taken: dict[int, int] = {}
        """The partitions served here now, each with the take it was (a generation)."""
        self.takes = 0
        self.seen: OrderedDict[str, tuple[int, int]] = OrderedDict()
        """Per session: the (partition, generation) its actor last acted under."""

    @property
    def held(self) -> list[int]:
        """The partitions held now."""
        return self.partitions.held

    def holds(self, session_id: str) -> bool:
        k = self.subjects.partition_of(session_id)
        return k in self.taken and self.partitions.owns(k)

    async def ensure(self, session_id: str) -> Ownership:
        k = self.subjects.partition_of(session_id)
        if not self.partitions.owns(k) or k not in self.taken:
            self.seen.pop(session_id, None)
            return Ownership.ELSEWHERE
        now = (k, self.taken[k])
        if self.seen.get(session_id) == now:
            self.seen.move_to_end(session_id)
            return Ownership.KEPT
        self.seen[session_id] = now  # taken (again) since: another runner may have acted
        if len(self.seen) > KNOWN_SESSIONS:
            self.seen.popitem(last=False)
        return Ownership.NEW

    async def confirm(self, session_id: str) -> bool:
        k = self.subjects.partition_of(session_id)
        return k in self.taken and await self.partitions.parts.confirm(str(k))

    def forget(self, session_id: str) -> None:
        """Its actor gone, the session's generation is moot (a new actor loads anyway), so
        `seen` holds the sessions with an actor, not every session seen."""
        self.seen.pop(session_id, None)

    async def serve(self, served: Served[Item], stop: asyncio.Event) -> None:
        actors_stop = asyncio.Event()  # the actors outlive the partitions: they nak what they hold
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(served.mailboxes.run(actors_stop))
            await asyncio.sleep(0)  # the mailboxes take items from here on
            try:
                await self.partitions.run(partial(self._serve_partition, served), stop)
            finally:
                await _drain(served.mailboxes)
                actors_stop.set()

    async def _serve_partition(
        self, served: Served[Item], k: int, owns: Callable[[], bool], stop: asyncio.Event
    ) -> None:
        """Partition k's worker: its consumer bound here, its open sessions woken, until
        `stop`; then unbound and its actors dropped (a fact they hold is nak'd)."""
        self.takes += 1
        self.taken[k] = self.takes
        mailboxes = served.mailboxes

        async def on_msg(msg: Any) -> None:
            item = Delivered.of(msg, decode(msg.data))
            mailboxes.deliver(item.event.session_id, item)

        bus = served.bus
        subs = Subscriptions()
        try:
            bound = bus.log_push(served.consumer, on_msg, partitions=[k])
            subs = await stoppable(bound, stop) or subs  # NATS slow: until the lease goes
            if stop.is_set():
                return
            log.info("turn-runner %s acts for partition %d", self.owner, k)
            await wake_waiting(served, stop, self.subjects.log_stream_at(k))
            await stop.wait()
        except StreamsMissing:
            raise  # the durable is missing: the setup step is to run (exit 2, naming it)
        except Exception:
            # e.g. the server away while taking it: the worker ends, the partition is handed
            # over and taken again (here or elsewhere) on a later round
            log.exception("partition %d failed; handing it over", k)
        finally:
            await subs.unsubscribe()
            self.taken.pop(k, None)
            for session_id in list(mailboxes.boxes):
                if self.subjects.partition_of(session_id) == k:
                    served.wake(session_id)  # ELSEWHERE now: it lets go, naks its facts
            log.info("turn-runner %s let partition %d go (still held: %s)", self.owner, k, owns())


async def _drain(mailboxes: Mailboxes[Item]) -> None:
    """Until the actors handed back the facts they held (or `DRAIN_S`)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(DRAIN_S):
            while len(mailboxes.kept):  # noqa: ASYNC110 (the actors' state)
                await asyncio.sleep(0.02)


def session_ownership(bus: Bus, leases: LeaseTable, policy: LeasePolicy) -> SessionOwnership:
    """Per-session leases on a log of one stream, partition ownership on a partitioned one."""
    if bus.subjects.partitioned:
        return PartitionSessions(bus, policy, leases.owner)
    # an idle session's lease released, its actor goes too: the next input reloads
    return SessionLeases(leases, policy, resume=wake_waiting, retire_released=True)
