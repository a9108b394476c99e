"""What the server refused this connection's NATS user, so a refused publish or subscription
is named as one instead of waiting out a timeout (ops/accounts.conf grants the rights).

The server answers a forbidden `PUB`/`SUB` with `-ERR 'Permissions Violation for Publish
to "<subject>"'` (or `Subscription`), nothing else: a JetStream publish would otherwise
wait for an ack that never comes. `Refusals.record` reads each such error (nats-py hands
it to the error callback, in lower case); `publish` races the ack against it.
"""

from __future__ import annotations

import asyncio
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

VIOLATION = re.compile(r'permissions violation for (publish|subscription) to "?([^"\s]+)"?')
REMEMBERED = 256
"""Refusals kept for a later look-up (a subscription's comes after the SUB is sent)."""
Action = Literal["publish", "subscription"]
API_WORDS = frozenset(
    "js api kv o stream consumer info create update delete purge msg get direct names list "
    "durable next ack fc account leader stepdown snapshot restore reset pause peer remove".split()
)


def as_sent(subject: str) -> str:
    """A refused subject as it was most likely sent: nats-py hands the server's error on in
    lower case, and `$js.api.stream.info.kv_ts_sessions` reads better as
    `$JS.API.STREAM.INFO.KV_ts_sessions` (JetStream's words and stream names in capitals,
    `KV_`/`OBJ_` before a bucket name); other subjects are left as they are."""
    if not subject.startswith("$"):
        return subject
    tokens = subject.split(".")
    out = []
    for token in tokens:
        bare = token.removeprefix("$")
        if bare in API_WORDS:
            out.append(token.upper())
        elif bare.startswith(("kv_", "obj_")):
            kind, _, name = token.partition("_")
            out.append(f"{kind.upper()}_{name}")
        elif re.fullmatch(r"[a-z0-9]+_(log|inbound|dead)(_\d+)?", token):
            out.append(token.upper())
        else:
            out.append(token)
    return ".".join(out)


class PermissionDenied(PermissionError):
    """The server refused this NATS user a publish or a subscription."""

    def __init__(self, user: str | None, action: Action, subject: str, text: str) -> None:
        self.user, self.action, self.subject = user, action, subject
        verb = "publish to" if action == "publish" else "subscribe to"
        who = f"NATS user {user!r}" if user else "this NATS connection (no user)"
        super().__init__(
            f"{who} may not {verb} {subject}: {text} (ops/accounts.conf grants each user its "
            "subjects: connect as a user that may, or grant it there)"
        )


@dataclass
class Refusals:
    """The permission errors the server sent one connection, by action and subject."""

    user: str | None
    seen: OrderedDict[tuple[Action, str], str] = field(default_factory=OrderedDict)
    waiting: dict[tuple[Action, str], set[asyncio.Future[str]]] = field(default_factory=dict)
    listeners: list[Callable[[PermissionDenied], None]] = field(default_factory=list)
    """Told of each refusal as it comes (a command that stops at the first one)."""

    def record(self, text: str) -> bool:
        """Note a refusal in the server error `text`; False when it is none."""
        found = VIOLATION.search(text.lower())
        if found is None:
            return False
        action: Action = "publish" if found.group(1) == "publish" else "subscription"
        key = (action, found.group(2))
        self.seen[key] = text
        self.seen.move_to_end(key)
        while len(self.seen) > REMEMBERED:
            self.seen.popitem(last=False)
        for waiter in self.waiting.pop(key, set()):
            if not waiter.done():
                waiter.set_result(text)
        for listener in list(self.listeners):
            listener(PermissionDenied(self.user, action, as_sent(key[1]), text))
        return True

    def denied(self, action: Action, subject: str) -> PermissionDenied | None:
        """The refusal of `subject` seen so far, if any."""
        text = self.seen.get((action, subject.lower()))
        return None if text is None else PermissionDenied(self.user, action, subject, text)

    def latest(self) -> PermissionDenied | None:
        """The last refusal seen (a JetStream API request refused looks like a timeout)."""
        if not self.seen:
            return None
        (action, subject), text = next(reversed(self.seen.items()))
        return PermissionDenied(self.user, action, as_sent(subject), text)

    async def publish(
        self, js: Any, subject: str, payload: bytes, *, headers: dict[str, str] | None = None
    ) -> Any:
        """`js.publish`, its ack; `PermissionDenied` as soon as the server refuses it."""
        key: tuple[Action, str] = ("publish", subject.lower())
        refused: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.waiting.setdefault(key, set()).add(refused)
        acking = asyncio.ensure_future(js.publish(subject, payload, headers=headers))
        try:
            await asyncio.wait({acking, refused}, return_when=asyncio.FIRST_COMPLETED)
            if refused.done() and not acking.done():
                acking.cancel()
                raise PermissionDenied(self.user, "publish", subject, refused.result())
            return acking.result()
        finally:
            self.waiting.get(key, set()).discard(refused)
            if not acking.done():
                acking.cancel()


async def answered(nc: Any) -> None:
    """Return once the server has answered all this connection sent so far, a refused
    subscription included (its error comes before the PONG of a PING sent after it).
    nats-py writes a flush's PING ahead of what it still buffers: the second one is after."""
    await nc.flush()
    await nc.flush()
