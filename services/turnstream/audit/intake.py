"""The audit's durable, read in batches: a pull consumer asked for what is waiting once a
batch has gathered.

A push consumer hands each event over as it is stored: at a turn's pace every event is
its own write by the server and its own wake-up here (socket read, parse, a task step),
which cost the audit more than handling the event. Here the server keeps the events
until they are asked for: one waiting request (`batch` 1) tells that something came,
then after `linger_s` one `no_wait` request takes everything waiting (up to the batch
size) in one burst, so a batch costs a few wake-ups, and one ack (`AckPolicy.ALL`)
covers it. Deliveries arrive in stream order on one inbox whatever request they answer,
so a late answer to an earlier request just joins the next batch. They are taken as the
connection parses them (`bus/raw.py`): the audit reads only their bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import orjson

from turnstream.bus.consume import pull_next_subject
from turnstream.bus.raw import Delivery, RawSubscription, raw_subscribe

log = logging.getLogger("turnstream.audit")
ANSWER_S = 2.0
"""How long a `no_wait` request may take to be answered before the batch goes without it
(a reconnect loses it; what it would have brought comes with the next)."""
WAIT_S = 2.0
"""The longest a waiting request waits: one lost on a reconnect (its answer with it) holds
the audit up for this long plus `ANSWER_S`."""
REFUSED_S = 1.0
"""The pause after a waiting request is refused at once (409: the consumer is gone, …)."""


class Intake:
    """Batches of a pull durable's messages, in stream order."""

    def __init__(self, nc: Any, stream: str, durable: str) -> None:
        self.nc = nc
        self.next_subject = pull_next_subject(stream, durable)
        self.inbox: str = nc.new_inbox()
        self.msgs: list[Delivery] = []
        """Delivered and not yet handed out, in stream order."""
        self.until = 0
        """The request waited on is over once `msgs` holds this many (or a status came)."""
        self.answered = asyncio.Event()
        self.status = ""
        """Of the last request that ended without filling its batch."""
        self.sub: RawSubscription | None = None

    async def start(self) -> Intake:
        self.sub = await raw_subscribe(self.nc, self.inbox, self._on_msg)
        return self

    async def stop(self) -> None:
        if self.sub is not None:
            with contextlib.suppress(Exception):
                await self.sub.unsubscribe()

    async def ack(self, msg: Delivery) -> None:
        """Ack `msg` (with `AckPolicy.ALL`: and every message before it)."""
        await self.nc.publish(msg.reply, b"+ACK")

    def _on_msg(self, msg: Delivery) -> None:
        if msg.reply:  # a delivery (`$JS.ACK.…`); the end of a request has no reply
            self.msgs.append(msg)
            if len(self.msgs) >= self.until:
                self.answered.set()
        else:  # 404 no messages, 408 expired, 409 (e.g. the consumer was deleted)
            self.status = msg.status
            if self.status not in ("404", "408"):
                log.warning("audit: the pull was refused: %s %s", self.status, msg.headers)
            self.answered.set()

    async def next_batch(
        self, wait_s: float, linger_s: float, limit: int, stop: asyncio.Event
    ) -> list[Delivery]:
        """The first message within `wait_s`, then what is waiting `linger_s` after it,
        up to `limit` messages; [] when none came or `stop` was set meanwhile."""
        if not self.msgs:
            wait_s = min(wait_s, WAIT_S)
            request = {"batch": 1, "expires": int(wait_s * 1e9)}
            self.status = ""
            await self._ask(request, 1, wait_s + ANSWER_S, stop)
            if not self.msgs:
                if self.status not in ("", "408"):  # refused at once: do not spin
                    await asyncio.sleep(min(wait_s, REFUSED_S))
                return []
        await asyncio.sleep(linger_s)
        if len(self.msgs) < limit:
            want = limit - len(self.msgs)
            await self._ask({"batch": want, "no_wait": True}, len(self.msgs) + want, ANSWER_S)
        batch, self.msgs = self.msgs[:limit], self.msgs[limit:]
        return batch

    async def _ask(
        self,
        request: dict[str, Any],
        until: int,
        timeout: float,
        stop: asyncio.Event | None = None,
    ) -> None:
        """Send a pull request; return once it is answered, `stop` is set, or after
        `timeout`."""
        self.until = until
        self.answered.clear()
        try:
            await self.nc.publish(self.next_subject, orjson.dumps(request), reply=self.inbox)
        except Exception as exc:  # disconnected: nats-py reconnects, the caller asks again
            log.warning("audit: pulling the log failed (%s)", exc)
            await asyncio.sleep(min(timeout, 0.5))
            return
        waits = [asyncio.ensure_future(self.answered.wait())]
        if stop is not None:
            waits.append(asyncio.ensure_future(stop.wait()))
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
