"""Exactly-once posting: every message a channel posts is recorded before it is posted (the
intent) and after (the platform's reference), in the channel's records (`channels.records`).

    record of part i      a restarted channel, asked to show it again
    none                  posts it (nothing was posted)
    intent, no reference  finds it by its tag where the platform can (`FindsPosts`) and
                          edits it; else posts it (the one window: killed after the
                          platform accepted the post and before the reference was
                          recorded, it is posted twice; docs/channels.md gives its width)
    reference             edits that message (never posts again)

A platform's 429 (`RateLimited`) is waited out and the same call made again: the message
arrives once, late. One turn's messages are shown one at a time (a lock per turn), so a
stream update and the final reply never race to post the first message.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import zlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from turnstream.channels.platform import (
    Button,
    Chat,
    FindsPosts,
    Platform,
    PlatformError,
    Press,
    RateLimited,
)
from turnstream.channels.records import Records

log = logging.getLogger("turnstream.channels")
T = TypeVar("T")
RATE_LIMIT_WAITS = 20
"""429s one call waits out before it gives up (the log event then comes again)."""
TRANSIENT_FOR_S = 300.0
"""How long a call that fails on the network (a timeout, a 5xx) is made again, the waits
doubling to `MAX_BACKOFF_S`, before it gives up (the log event then comes again)."""
MAX_BACKOFF_S = 30.0


class Poster:
    """Posts and edits a platform's messages, exactly once as far as the platform allows."""

    def __init__(self, platform: Platform, records: Records) -> None:
        self.platform, self.records = platform, records
        self._locks: dict[str, asyncio.Lock] = {}
        self._no_drafts: set[str] = set()

    def lock(self, turn_id: str) -> asyncio.Lock:
        return self._locks.setdefault(turn_id, asyncio.Lock())

    def forget(self, turn_id: str) -> None:
        self._locks.pop(turn_id, None)

    async def call(
        self, method: str, make: Callable[[], Awaitable[T]], *, patient: bool = True
    ) -> T:
        """`make()`, again after each 429's wait (`RATE_LIMIT_WAITS` at most) and, `patient`,
        after a network failure (for `TRANSIENT_FOR_S`, backing off)."""
        limited, backoff = 0, 1.0
        deadline = asyncio.get_running_loop().time() + TRANSIENT_FOR_S
        while True:
            try:
                return await make()
            except RateLimited as exc:
                limited += 1
                if limited > RATE_LIMIT_WAITS:
                    raise
                log.warning("%s: rate limited, waiting %.1f s", method, exc.retry_after_s)
                await asyncio.sleep(exc.retry_after_s)
            except PlatformError as exc:
                late = asyncio.get_running_loop().time() > deadline
                if not (patient and exc.transient) or late:
                    raise
                log.warning("%s; again in %.0f s", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)

    async def track(self, turn_id: str, session_id: str, chat: Chat, sender: str) -> None:
        """The turn's record, made once: its chat and who asked (they answer its prompts).
        Live tokens do not wait for the log, so a `stream` may have made the record first:
        then these are added to it. Under the turn's lock, as `stream` writes it."""
        asker = {"session": session_id, "chat": chat.token(), "sender": sender}
        async with self.lock(turn_id):
            if await self.records.create_turn(turn_id, {**asker, "parts": []}):
                return
            found = await self.records.turn(turn_id) or {"parts": []}
            if found.get("sender") != sender or found.get("session") != session_id:
                await self.records.put_turn(turn_id, {**found, **asker})

    async def show(
        self,
        turn_id: str,
        index: int,
        chat: Chat,
        text: str,
        record: dict[str, Any],
        *,
        patient: bool = True,
        buttons: Sequence[Button] = (),
    ) -> None:
        """Part `index` of the turn's messages shows `text`: edited if it was posted, else
        posted (its intent recorded before, its reference after). `record` is the turn's
        record, changed in place and stored. Not `patient` (a stream update): a network
        failure is not waited out, the next update or the final reply comes anyway."""
        parts: list[dict[str, Any]] = record.setdefault("parts", [])
        if index < len(parts) and parts[index].get("ref"):
            ref = parts[index]["ref"]
            await self.call(
                "edit", lambda: self.platform.edit(chat, ref, text, buttons), patient=patient
            )
            return
        tag = f"{turn_id}:{index}"
        if index < len(parts):
            found = await self._found(chat, tag)
            if found is not None:
                parts[index] = {"ref": found}
                await self.records.put_turn(turn_id, record)
                await self.call("edit", lambda: self.platform.edit(chat, found, text, buttons))
                return
            log.warning(
                "turn %s message %d: its post was cut short by a restart before its "
                "reference was recorded; posting it (docs/channels.md, the one window)",
                turn_id,
                index,
            )
        while len(parts) <= index:
            parts.append({"ref": None})
        await self.records.put_turn(turn_id, record)  # the intent
        ref = await self.call("post", lambda: self._post(chat, text, tag, buttons), patient=patient)
        parts[index] = {"ref": ref}
        await self.records.put_turn(turn_id, record)

    async def _post(self, chat: Chat, text: str, tag: str, buttons: Sequence[Button] = ()) -> str:
        if isinstance(self.platform, FindsPosts):
            return await self.platform.post_tagged(chat, text, tag, buttons)
        return await self.platform.post(chat, text, buttons)

    async def _found(self, chat: Chat, tag: str) -> str | None:
        """The message posted with `tag`, where the platform can find one again."""
        if not isinstance(self.platform, FindsPosts):
            return None
        finds = self.platform
        return await self.call("find", lambda: finds.find_tagged(chat, tag))

    async def stream(self, turn_id: str, chat: Chat, text: str) -> None:
        """The reply so far: a native draft in a private chat where the platform has one,
        else the turn's first message (posted once, then edited)."""
        async with self.lock(turn_id):
            record = await self.records.turn(turn_id) or {"parts": []}
            if record.get("done"):
                return
            if chat.private and chat.id not in self._no_drafts:
                draft_id = zlib.crc32(turn_id.encode()) or 1
                try:
                    drafted = self.call(
                        "draft", lambda: self.platform.draft(chat, draft_id, text), patient=False
                    )
                    if await drafted:
                        return
                except PlatformError as exc:
                    if exc.transient:
                        return  # the next update tries again
                    log.warning("%s; streaming by edits in this chat", exc)
                self._no_drafts.add(chat.id)
            stop = (Button("⏹ Stop", turn_id, "stop"),)  # the final edit takes it away
            await self.show(turn_id, 0, chat, text, record, patient=False, buttons=stop)

    async def final(self, turn_id: str, chat: Chat, parts: Sequence[str]) -> None:
        """The reply, once: each part shown (`show`), then the turn marked done."""
        async with self.lock(turn_id):
            record = await self.records.turn(turn_id) or {"parts": []}
            if record.get("done"):
                return
            for index, text in enumerate(parts):
                await self.show(turn_id, index, chat, text, record)
            record["done"] = True
            await self.records.put_turn(turn_id, record)
        self.forget(turn_id)

    async def prompt(
        self,
        turn_id: str,
        session_id: str,
        chat: Chat,
        interaction_id: str,
        text: str,
        buttons: Sequence[Button],
    ) -> None:
        """An approval prompt with its buttons, posted once; its record names the session
        and the turn's sender, who may answer it (`inbound.decide_press`)."""
        found = await self.records.prompt(interaction_id)
        if found is not None and found.get("ref"):
            return
        tag = f"prompt:{interaction_id}"
        if found is not None:  # its intent without a reference: the window
            ref = await self._found(chat, tag)
            if ref is not None:
                await self.records.put_prompt(interaction_id, {**found, "ref": ref})
                return
        turn = await self.records.turn(turn_id) or {}
        record = {
            "session": session_id,
            "sender": turn.get("sender", ""),
            "chat": chat.token(),
            "text": text,
            "ref": None,
        }
        await self.records.put_prompt(interaction_id, record)  # the intent
        ref = await self.call("post", lambda: self._post(chat, text, tag, buttons))
        await self.records.put_prompt(interaction_id, {**record, "ref": ref})

    async def notice(self, key: str, chat: Chat, text: str) -> None:
        """A reply that starts no turn (a refusal, a pairing code, `/new`'s), posted once per
        platform message `key`: a re-delivered message is not told again. Recorded as a
        turn's part is (the intent, then the reference), with the same one window."""
        name = notice_name(key)
        found = await self.records.notice(name)
        if found is not None and found.get("ref"):
            return
        tag = f"notice:{name}"
        if found is not None:
            ref = await self._found(chat, tag)
            if ref is not None:
                await self.records.put_notice(name, {"ref": ref})
                return
        await self.records.put_notice(name, {"ref": None})  # the intent
        ref = await self.call("post", lambda: self._post(chat, tag=tag, text=text))
        await self.records.put_notice(name, {"ref": ref})

    async def answer(self, press: Press, text: str, *, alert: bool) -> None:
        """A press answered once (`Platform.answer_press`): a re-delivered press is not
        answered again. Recorded after the answer: killed in between, it is answered twice
        (a press's answer cannot be found again)."""
        name = notice_name(press.key)
        if await self.records.notice(name) is not None:
            return
        await self.call(
            "answer_press", lambda: self.platform.answer_press(press, text, alert=alert)
        )
        await self.records.put_notice(name, {"ref": "answered"})

    async def close_prompt(self, chat: Chat, interaction_id: str, text: str) -> None:
        """The prompt's buttons replaced by how it was answered."""
        found = await self.records.prompt(interaction_id)
        if found is None or not found.get("ref") or found.get("closed"):
            return
        ref, shown = found["ref"], f"{found.get('text', '')}\n\n{text}".strip()
        await self.call("edit", lambda: self.platform.edit(chat, ref, shown))
        await self.records.put_prompt(interaction_id, {**found, "closed": True})


def notice_name(key: str) -> str:
    """A platform message's identity as a short record name and post tag."""
    return hashlib.sha256(key.encode()).hexdigest()[:32]
