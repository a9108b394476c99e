"""A channel's durable records, in its own KV bucket (`bus.streams.channel_bucket`):

    key                  value
    turn.<turnId>        the turn's chat, sender, and each message posted for it: `ref` null
                         while it is being posted (the intent), the platform's reference after
    prompt.<interaction> the same for an approval prompt, with its session and asker
    gen.<base session>   how many times `/new` was said in a conversation
    pairing              the open pairing codes (`channels.pairing.Book`), changed by CAS
    paired.<user>        a sender approved through pairing

Rebuildable it is not (what was posted is the platform's fact, not the log's): it is the
posting record that makes a restarted channel edit instead of post again. A turn's and a
prompt's records expire after `POSTED_TTL_S` (a per-key TTL), long after their events can
come again; pairing and `/new` generations are kept.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from typing import Any

import orjson

from turnstream.bus import Bus
from turnstream.bus.errors import JetStreamError, KeyChanged, KeyMissing
from turnstream.bus.port import KeyValue
from turnstream.bus.store import WRONG_LAST_SEQUENCE
from turnstream.bus.streams import channel_bucket
from turnstream.channels.pairing import Book, Request

PAIRING = "pairing"
POSTED_TTL_S = 7 * 24 * 3600
"""How long a turn's or a prompt's posting record is kept: the bucket does not grow with
every turn for ever, and a log event is redelivered within seconds, not days."""
_KEY_UNSAFE = re.compile(r"[^-/_=.a-zA-Z0-9]")


def key_token(value: str) -> str:
    """`value` as one token of a KV key."""
    return _KEY_UNSAFE.sub("_", value).replace(".", "_")


class Records:
    """The records of the channel of one platform."""

    def __init__(self, kv: KeyValue, bus: Bus, bucket: str) -> None:
        self.kv, self.bus, self.bucket = kv, bus, bucket

    @classmethod
    async def open(cls, bus: Bus, platform: str) -> Records:
        """The platform's bucket, which the setup step made."""
        bucket = channel_bucket(bus.subjects.prefix, platform)
        return cls(await bus.existing_bucket(bucket), bus, bucket)

    async def _expiring(self, key: str, value: dict[str, Any], *, create: bool = False) -> bool:
        """`value` at `key` for `POSTED_TTL_S` (`create`: unless the key has one; False if
        it had)."""
        headers = {"Nats-TTL": f"{POSTED_TTL_S}s"}
        if create:
            headers["Nats-Expected-Last-Subject-Sequence"] = "0"
        try:
            await self.bus.publish(f"$KV.{self.bucket}.{key}", orjson.dumps(value), headers=headers)
        except JetStreamError as exc:
            if create and exc.err_code in WRONG_LAST_SEQUENCE:
                return False
            raise
        return True

    async def get(self, key: str) -> dict[str, Any] | None:
        try:
            entry = await self.kv.get(key)
        except KeyMissing:
            return None
        return orjson.loads(entry.value) if entry.value else None

    async def put(self, key: str, value: dict[str, Any]) -> None:
        await self.kv.put(key, orjson.dumps(value))

    async def create(self, key: str, value: dict[str, Any]) -> bool:
        """Write `value` unless `key` has one; False if it had."""
        try:
            await self.kv.create(key, orjson.dumps(value))
        except KeyChanged:
            return False
        return True

    # turns and prompts: what was posted
    async def turn(self, turn_id: str) -> dict[str, Any] | None:
        return await self.get(f"turn.{key_token(turn_id)}")

    async def create_turn(self, turn_id: str, value: dict[str, Any]) -> bool:
        return await self._expiring(f"turn.{key_token(turn_id)}", value, create=True)

    async def put_turn(self, turn_id: str, value: dict[str, Any]) -> None:
        await self._expiring(f"turn.{key_token(turn_id)}", value)

    async def prompt(self, interaction_id: str) -> dict[str, Any] | None:
        return await self.get(f"prompt.{key_token(interaction_id)}")

    async def put_prompt(self, interaction_id: str, value: dict[str, Any]) -> None:
        await self._expiring(f"prompt.{key_token(interaction_id)}", value)

    # notices: replies that start no turn (refusals, pairing codes, `/new`), press answers
    async def notice(self, name: str) -> dict[str, Any] | None:
        return await self.get(f"notice.{key_token(name)}")

    async def put_notice(self, name: str, value: dict[str, Any]) -> None:
        await self._expiring(f"notice.{key_token(name)}", value)

    # conversations
    async def generation(self, base: str) -> tuple[int, str | None]:
        """How many times `/new` was said in a conversation, and the key of the last."""
        found = await self.get(f"gen.{key_token(base)}")
        return (int(found["generation"]), found.get("by")) if found else (0, None)

    async def set_generation(self, base: str, generation: int, by: str) -> None:
        await self.put(f"gen.{key_token(base)}", {"generation": generation, "by": by})

    # pairing
    async def paired(self, user: str) -> bool:
        return await self.get(f"paired.{key_token(user)}") is not None

    async def pair(self, request: Request) -> None:
        await self.put(f"paired.{key_token(request.user)}", request.as_json())

    async def book(self) -> tuple[Book, int]:
        """The pairing book and its revision (0: none yet)."""
        try:
            entry = await self.kv.get(PAIRING)
        except KeyMissing:
            return Book(), 0
        return Book.of_json(
            orjson.loads(entry.value)
        ) if entry.value else Book(), entry.revision or 0

    async def change_book(self, change: Callable[[Book], Book]) -> Book:
        """Apply `change` to the pairing book by compare-and-set, again on a conflict."""
        while True:
            book, revision = await self.book()
            changed = change(book)
            value = orjson.dumps(changed.as_json())
            try:
                if revision == 0:
                    await self.kv.create(PAIRING, value)
                else:
                    await self.kv.update(PAIRING, value, last=revision)
            except KeyChanged:
                await asyncio.sleep(0.01)
                continue
            return changed


async def approve(records: Records, code: str, now: float | None = None) -> Request | None:
    """Pair the sender of an open `code` (None: no such open code)."""
    now = time.time() if now is None else now
    book, _ = await records.book()
    request = book.find(code, now)
    if request is None:
        return None
    await records.pair(request)
    await records.change_book(lambda b: b.without(request.code, now))
    return request


async def deny(records: Records, code: str, now: float | None = None) -> Request | None:
    """Drop an open `code` (None: no such open code)."""
    now = time.time() if now is None else now
    book, _ = await records.book()
    request = book.find(code, now)
    if request is not None:
        await records.change_book(lambda b: b.without(request.code, now))
    return request
