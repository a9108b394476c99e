"""A session's actor under a lease: the lease handling the turn-runner's and the approval
service's actors share, written once.

A service whose instances share one consumer acts for each session on one instance at a
time: the holder of the session's lease (`bus/leases.LeaseTable`, one namespace per
service). `SessionLeases` is that service's side: the table, its policy, and `serve`,
which consumes into the mailboxes while `keep_leases` renews the leases of sessions with
open work, lets idle ones go and hands every one over on stop, and the lease watch wakes
the sessions whose holder stopped renewing. `LeasedActor` is the actor's side:

    handle an item      `leased`: ensure the lease; KEPT: step on what is in memory;
                        NEW: step on the log read again; ELSEWHERE: `let_go` (a delivery
                        is nak'd for `retry_s`, to be redelivered until the holder has it)
    before an append    `take_again` once `holds` says the lease lapsed (this process was
                        paused past its TTL): NEW means reload, ELSEWHERE raises `LeaseLost`
    LeaseLost in a step `let_go`
    the log full        `storage_wait`: the item comes again later, backing off

Each service keeps what is its own: what a step is, what is let go with the session
(`unload`), how its own inputs come back (`later`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar, assert_never

from turnstream.bus.appender import LogFull
from turnstream.bus.durables import Durable
from turnstream.bus.full import backoff_s
from turnstream.bus.leases import LeaseTable, Ownership
from turnstream.runtime.leasing import LeasePolicy, keep_leases
from turnstream.runtime.mailbox import Delivered, Mailboxes, serve_sessions

if TYPE_CHECKING:
    from turnstream.bus import Bus

Item = TypeVar("Item")


class LeaseLost(Exception):
    """Another instance holds the session now: stop acting for it."""


class SessionLease(Protocol):
    """What an actor asks of its service's hold on sessions (a lease per session, or the
    runner's partitions)."""

    owner: str
    """This instance's name in the leases it writes."""
    retry_s: float
    """How long a fact for a session held elsewhere waits before it is redelivered."""

    def holds(self, session_id: str) -> bool:
        """Whether this instance acts for the session now (no round trip)."""
        ...

    async def ensure(self, session_id: str) -> Ownership:
        """KEPT: ours, state current; NEW: ours now, reload; ELSEWHERE: not ours."""
        ...


@dataclass(frozen=True)
class Served(Generic[Item]):
    """What a service's hold on sessions serves: its consumer, mailboxes and wake-ups."""

    bus: Bus
    mailboxes: Mailboxes[Item]
    consumer: Durable
    """The service's durable on the log."""
    open_work: Callable[[str], bool]
    """Whether a session's actor has open work (its lease is kept)."""
    wake: Callable[[str], None]
    """Have a session's actor look at its session again (take it over, or let it go)."""


Resume = Callable[[Served[Any], asyncio.Event], Awaitable[None]]
"""What a service does once its sessions can be served (wake those a restart left open),
until the stop event is set."""


async def _no_resume(_served: Served[Any], _stop: asyncio.Event) -> None:
    return None


class SessionLeases:
    """One lease per session (`bus/leases.LeaseTable`), for a service whose instances share
    one consumer: a fact for a session leased elsewhere is nak'd for `retry_s`."""

    def __init__(
        self,
        leases: LeaseTable,
        policy: LeasePolicy,
        *,
        resume: Resume = _no_resume,
        retire_released: bool = False,
        watch_holders: bool = False,
    ) -> None:
        self.leases = leases
        self.policy = policy
        self.owner = leases.owner
        self.retry_s = policy.retry_s
        self.resume = resume
        self.retire_released = retire_released
        """Whether an actor goes once its idle session's lease is released (its state is
        stale from then on: the next input reloads)."""
        self.holders: dict[str, str] | None = {} if watch_holders else None
        """Who holds each session's lease, as the lease watch last saw it (if watched)."""

    def holds(self, session_id: str) -> bool:
        return self.leases.holds(session_id)

    async def ensure(self, session_id: str) -> Ownership:
        return await self.leases.ensure(session_id)

    async def confirm(self, session_id: str) -> bool:
        return await self.leases.confirm(session_id)

    def forget(self, session_id: str) -> None:
        """Nothing kept per actor: the lease goes by `keep_leases` (idle, released)."""

    def elsewhere(self, session_id: str) -> bool:
        """Whether the lease watch last saw another instance hold the session's lease."""
        holders = self.holders
        return holders is not None and holders.get(session_id) not in (None, self.owner)

    def _seen_holder(self, session_id: str, owner: str | None) -> None:
        assert self.holders is not None
        if owner is None:
            self.holders.pop(session_id, None)
        else:
            self.holders[session_id] = owner

    async def serve(self, served: Served[Any], stop: asyncio.Event) -> None:
        """Consume into the mailboxes and keep the leases until `stop`; then hand over."""

        async def resume() -> None:
            # one still leased elsewhere is woken again when its lease expires
            seen = self._seen_holder if self.holders is not None else None
            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(self.leases.watch_expiries(served.wake, stop, seen))
                await self.resume(served, stop)

        retire = served.mailboxes.retire if self.retire_released else _kept
        keeping = keep_leases(self.leases, self.policy, served.open_work, served.wake, stop, retire)
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(keeping)
            tasks.create_task(
                serve_sessions(
                    served.bus, served.mailboxes, served.consumer, Delivered.of, stop, resume
                )
            )


def _kept(_session_id: str) -> None:
    """An actor outlives its session's lease (what it loaded is read again if taken anew)."""


class LeasedActor(Generic[Item]):
    """The lease handling of a session's actor (see the module's table). A subclass sets
    `session_id`, `loaded`, `lease`, `refusals` and says what `step`, `unload` and
    `later` mean."""

    log: ClassVar[logging.Logger] = logging.getLogger("turnstream")
    session_id: str
    loaded: bool
    """Whether the state in memory is the session's as the log has it (else: reload)."""
    lease: SessionLease
    refusals: int
    """Tries refused in a row for storage (the log full): the backoff's count."""

    async def step(self, item: Item) -> None:
        """Handle `item` under the lease (reading the session first if not `loaded`)."""
        raise NotImplementedError

    def unload(self) -> None:
        """The session is let go: what the actor keeps beside the log (state, timers,
        calls in flight) goes too."""
        raise NotImplementedError

    def later(self, item: Item, delay_s: float) -> object:
        """Have one of the actor's own items (not a delivery) come again after `delay_s`."""
        raise NotImplementedError

    async def leased(self, item: Item) -> bool:
        """Handle `item` if this instance holds the session's lease (taking it if it is
        free), else let the session go; False when storage refused it (`storage_wait`)."""
        try:
            ownership = await self.lease.ensure(self.session_id)
            self.log.debug("%s: %s, %s", self.session_id, _named(item), ownership.value)
            match ownership:
                case Ownership.ELSEWHERE:
                    await self.let_go(item)
                    return True
                case Ownership.NEW:
                    self.loaded = False  # another instance may have acted: the log knows
                case Ownership.KEPT:
                    pass
                case _:
                    assert_never(ownership)
            try:
                await self.step(item)
            except LeaseLost:
                await self.let_go(item)
        except LogFull as exc:  # the log (or the lease bucket: the server's store) is full
            await self.storage_wait(item, exc)
            return False
        return True

    async def take_again(self) -> bool:
        """The lease lapsed here (`lease.holds` said so: e.g. this process was paused past
        its TTL): take it again before an append. True: taken anew, another instance may
        have acted since (read the session again); `LeaseLost`: another holds it."""
        match await self.lease.ensure(self.session_id):
            case Ownership.ELSEWHERE:
                raise LeaseLost(self.session_id)
            case Ownership.NEW:
                return True
            case Ownership.KEPT:
                return False
            case other:
                assert_never(other)

    async def let_go(self, item: Item) -> None:
        """Another instance holds the session: stop acting for it, never fight over it. A
        delivery goes back to the consumer, to be redelivered until the holder takes it."""
        if self.loaded:
            self.log.info("session %s is leased elsewhere now; letting it go", self.session_id)
        self.loaded = False
        self.unload()
        if isinstance(item, Delivered):
            self.log.debug("%s: nak %s", self.session_id, item)
            await item.msg.nak(delay=self.lease.retry_s)

    async def again(self, item: Item, delay_s: float) -> None:
        """`item` comes again after `delay_s`: a delivery nak'd, our own item delivered
        later (nobody else would bring it back)."""
        if isinstance(item, Delivered):
            await item.msg.nak(delay=delay_s)
        else:
            self.later(item, delay_s)

    async def storage_wait(self, item: Item, exc: LogFull) -> None:
        """The store refused what handling `item` wrote: it comes again later, backing off
        (the process's alarm said so once, at ERROR; this is not a failure of the item).
        The state is read from the log again then."""
        self.loaded = False
        self.refusals += 1
        delay = backoff_s(self.refusals)
        self.log.info(
            "%s: appends refused for storage; trying again in %.0f s", self.session_id, delay
        )
        await self.again(item, delay)


def _named(item: object) -> object:
    """An item as the debug log names it: a delivered fact formats itself when written."""
    return item if isinstance(item, Delivered) else type(item).__name__
