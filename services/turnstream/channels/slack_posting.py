"""Exactly-once posting on Slack: the core's `Poster` (which tags every post and finds it
again through `SlackPlatform`'s `FindsPosts`: a post Slack accepted and the channel never
recorded is edited, not posted twice), with Slack's native stream.

The reply streams natively (`chat.startStream` / `appendStream` / `stopStream`, through
`slack_sdk`'s chat stream helper) in the turn's first message, whose record says `stream:
open` and what it shows; the final text stops that stream (only the rest appended, or the
whole replaced when it does not extend what was shown) with the tag in its metadata. A
stream start carries no metadata (Slack takes none there): a restarted channel that finds
a stream's intent without its ts takes the bot's unmarked message in the thread (every
other post, and every stopped stream, is tagged). Where Slack refuses a stream (no thread,
not enabled for the app), the reply streams by throttled `chat.update`s of one message.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from turnstream.channels.platform import Button, Chat, PlatformError
from turnstream.channels.posting import Poster
from turnstream.channels.records import Records

if TYPE_CHECKING:
    from turnstream.channels.slack_platform import SlackPlatform

log = logging.getLogger("turnstream.channels.slack")
STATUS_MARK = "🔧 "
"""How the core's status line of a running tool begins (`channels.text.tool_line`)."""


def body_and_status(text: str) -> tuple[str, str | None]:
    """A streamed text as the reply so far and the status line at its end, if any."""
    head, sep, last = text.rpartition("\n\n")
    if last.startswith(STATUS_MARK):
        return (head if sep else ""), last
    return text, None


class SlackPoster(Poster):
    """See the module docstring."""

    def __init__(self, platform: SlackPlatform, records: Records) -> None:
        super().__init__(platform, records)
        self.slack = platform
        self._no_stream: set[str] = set()

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
        parts: list[dict[str, Any]] = record.setdefault("parts", [])
        part = parts[index] if index < len(parts) else None
        if part is not None and part.get("stream") == "starting":
            unmarked = await self.call("find", lambda: self.slack.find_unmarked(chat))
            if unmarked is not None:
                part.update(ref=unmarked[0], stream="open", shown=unmarked[1])
            else:
                part.pop("stream")
        if part is not None and part.get("stream") == "open" and part.get("ref"):
            await self._stop(chat, text, f"{turn_id}:{index}", part, record, turn_id)
            return
        await super().show(turn_id, index, chat, text, record, patient=patient, buttons=buttons)

    async def _stop(
        self,
        chat: Chat,
        text: str,
        tag: str,
        part: dict[str, Any],
        record: dict[str, Any],
        turn_id: str,
    ) -> None:
        ref, shown = str(part["ref"]), str(part.get("shown", ""))
        extends = text.startswith(shown)
        try:
            rest = text[len(shown) :] if extends else ""
            await self.call("stop", lambda: self.slack.stream_stop(chat, ref, rest, tag))
            replace = not extends
        except PlatformError as exc:
            if exc.code != "message_not_in_streaming_state":
                raise
            replace = text != shown  # stopped before a restart, or expired
        if replace:
            await self.call("edit", lambda: self.platform.edit(chat, ref, text))
        part.update(stream="stopped", shown=text)
        await self.records.put_turn(turn_id, record)

    async def stream(self, turn_id: str, chat: Chat, text: str) -> None:
        async with self.lock(turn_id):
            record = await self.records.turn(turn_id) or {"parts": []}
            if record.get("done"):
                return
            parts: list[dict[str, Any]] = record.setdefault("parts", [])
            native = chat.thread is not None and chat.id not in self._no_stream
            if not native or (parts and parts[0].get("stream") is None):
                await self._edited(turn_id, chat, text, record)
                return
            body, status = body_and_status(text)
            if status is not None:
                await self._status(chat, status)
            if not parts:
                await self._start(turn_id, chat, body, record)
            elif not parts[0].get("ref"):
                await self._resume(turn_id, chat, body, record)
            elif parts[0].get("stream") == "open":
                await self._append(turn_id, chat, body, record)

    async def _edited(self, turn_id: str, chat: Chat, text: str, record: dict[str, Any]) -> None:
        """The reply so far in one message edited as it grows, with a stop button (the
        final edit takes it away), as the core streams where there is no native stream."""
        stop = (Button("⏹ Stop", turn_id, "stop"),)
        await self.show(turn_id, 0, chat, text, record, patient=False, buttons=stop)

    async def _status(self, chat: Chat, status: str) -> None:
        try:
            await self.call("status", lambda: self.slack.typing(chat, status))
        except PlatformError as exc:
            log.debug("status not shown: %s", exc)

    async def _start(self, turn_id: str, chat: Chat, body: str, record: dict[str, Any]) -> None:
        if not body:
            return
        parts: list[dict[str, Any]] = record["parts"]
        parts.append({"ref": None, "stream": "starting"})
        await self.records.put_turn(turn_id, record)  # the intent
        recipient = str(record.get("sender", ""))
        try:
            ts = await self.call(
                "start", lambda: self.slack.stream_start(chat, body, recipient), patient=False
            )
        except PlatformError as exc:
            if exc.transient:  # started or not: the intent stays, the next update finds out
                raise
            log.warning("%s; streaming by edits in %s", exc, chat.id)
            self._no_stream.add(chat.id)
            parts.clear()
            await self._edited(turn_id, chat, body, record)
            return
        parts[0] = {"ref": ts, "stream": "open", "shown": body}
        await self.records.put_turn(turn_id, record)

    async def _resume(self, turn_id: str, chat: Chat, body: str, record: dict[str, Any]) -> None:
        """A stream's intent without its ts: started and not recorded, or never started."""
        found = await self.call("find", lambda: self.slack.find_unmarked(chat))
        if found is None:
            record["parts"] = []
            await self._start(turn_id, chat, body, record)
            return
        ts, text = found
        log.info("turn %s: its stream %s found in the thread; not started again", turn_id, ts)
        record["parts"][0] = {"ref": ts, "stream": "open", "shown": text}
        await self.records.put_turn(turn_id, record)
        await self._append(turn_id, chat, body, record)

    async def _append(self, turn_id: str, chat: Chat, body: str, record: dict[str, Any]) -> None:
        part = record["parts"][0]
        shown = str(part.get("shown", ""))
        if len(body) <= len(shown) or not body.startswith(shown):
            return  # nothing new, or not an extension: the final text settles it
        ref = str(part["ref"])
        try:
            await self.call(
                "append",
                lambda: self.slack.stream_append(chat, ref, body[len(shown) :]),
                patient=False,
            )
        except PlatformError as exc:
            if exc.code != "message_not_in_streaming_state":
                raise
            part["stream"] = "stopped"  # expired: the final text is an edit
        part["shown"] = body
        await self.records.put_turn(turn_id, record)

    async def final(self, turn_id: str, chat: Chat, parts: Sequence[str]) -> None:
        await super().final(turn_id, chat, parts)
        await self._status(chat, "")  # the thread's "is working…" cleared
