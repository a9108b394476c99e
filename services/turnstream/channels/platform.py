"""What a chat platform module gives the channel core: the `Platform` protocol and the
platform-agnostic values that cross it (a chat, a message, a button press, a delivery).

A platform module turns its SDK's objects into these values and these calls into its SDK's
calls; it decides nothing (who may talk, which session, what to post, when: the core does).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from turnstream.settings import SessionScope

Decision = Literal["approve", "deny", "stop"]
"""What a button does: answer an approval prompt, or stop the turn being streamed."""


@dataclass(frozen=True)
class Chat:
    """Where a message came from, and where its replies go."""

    id: str
    """The platform's chat id (a Telegram chat id, a Slack channel id)."""
    private: bool
    """A direct message with one person (DM policies apply), else a group."""
    topic: str | None = None
    """A sub-chat that is a conversation of its own (a Telegram forum topic)."""
    thread: str | None = None
    """The thread a message is in or starts (a Slack thread's `thread_ts`)."""

    def token(self) -> str:
        """The chat as the `chatId` of a command: every event of the turn carries it, so the
        reply goes back where the message came from (`Chat.parse` reads it)."""
        kind = "p" if self.private else "g"
        return "|".join((kind, self.id, self.topic or "", self.thread or ""))

    @classmethod
    def parse(cls, token: str) -> Chat | None:
        """The chat a `token` names; None for a chatId no channel wrote."""
        parts = token.split("|")
        if len(parts) != 4 or parts[0] not in ("p", "g") or not parts[1]:
            return None
        kind, chat_id, topic, thread = parts
        return cls(chat_id, kind == "p", topic or None, thread or None)


@dataclass(frozen=True)
class File:
    """A file or image a message carries, as the platform describes it before it is
    fetched (`Platform.download`)."""

    name: str
    media_type: str
    size: int | None
    """Bytes, as the platform says; None where it does not (checked once fetched)."""
    ref: str
    """What the platform needs to fetch it (a Telegram `file_id`, a Slack file's
    `url_private_download`)."""


@dataclass(frozen=True)
class Incoming:
    """One message the platform delivered."""

    key: str
    """The platform's identity of this message (Telegram `update_id` + `message_id`, Slack
    `event_id`/`client_msg_id`): the command's idempotencyKey, so a re-delivery is one turn."""
    chat: Chat
    user: str
    """The sender's platform user id."""
    user_name: str
    text: str
    """Commands (`/stop`, `/new`) without the platform's `@botname` suffix."""
    from_bot: bool = False
    from_self: bool = False
    """Sent by this very bot (an echo of its own post)."""
    mentions_bot: bool = False
    """Mentions the bot, or replies to one of its messages (group mention gating)."""
    files: tuple[File, ...] = ()
    """Files and images the message carries: the command's attachments."""


@dataclass(frozen=True)
class Press:
    """A press of an approval prompt's button."""

    key: str
    """The platform's identity of the press."""
    chat: Chat
    user: str
    user_name: str
    interaction_id: str
    """The prompt's interaction id; for `stop`, the turn's id."""
    decision: Decision
    ref: str
    """What the platform needs to answer the press (a Telegram callback query id)."""


Inbound = Incoming | Press


@dataclass(frozen=True)
class Delivery:
    """What one receive of the platform gave, and how to acknowledge it to the platform.
    The core calls `ack` only after every item's command is stored (PubAck from the inbound
    stream): a channel killed before that gets the same items again."""

    items: Sequence[Inbound]
    ack: Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class Button:
    """One native button of an approval prompt."""

    label: str
    interaction_id: str
    """The prompt's interaction id; for `stop`, the turn's id."""
    decision: Decision


class RateLimited(Exception):
    """The platform asked to wait (HTTP 429, `retry_after`): the core waits that long and
    makes the same call again, so the message still arrives, once."""

    def __init__(self, retry_after_s: float) -> None:
        super().__init__(f"rate limited: retry after {retry_after_s:g} s")
        self.retry_after_s = retry_after_s


class PlatformError(Exception):
    """A platform API call failed: the method and the platform's error code, never a
    token. `transient` (the network, a timeout, a 5xx): the log event comes again and the
    call is made again; else (a bad request, a bot blocked or removed from the chat) the
    core logs it and goes on."""

    def __init__(
        self, method: str, code: str, description: str = "", *, transient: bool = False
    ) -> None:
        super().__init__(f"{method} failed: {code} {description}".strip())
        self.method, self.code, self.transient = method, code, transient


class TooLarge(Exception):
    """A file found over the size limit before all of it was fetched (`Platform.download`)."""

    def __init__(self, size: int) -> None:
        super().__init__(f"{size} bytes")
        self.size = size


@dataclass(frozen=True)
class Limits:
    """What the platform allows."""

    text: int
    """Characters of one message (Telegram 4,096; Slack 40,000, 3,000 per block)."""
    default_scope: SessionScope
    """One session per `thread`, `chat` or `user` unless the settings say otherwise."""
    typing_every_s: float = 4.0
    """How often the working indicator is renewed while a turn runs."""
    extra: dict[str, str] = field(default_factory=dict)


class Platform(Protocol):
    """A chat platform, as the channel core uses it (`channels.telegram` is one).

    Text handed to `post`, `edit` and `draft` is the agent's Markdown, within
    `limits.text` characters: the platform converts it to its markup."""

    name: str
    """`telegram`, `slack`: the session-id prefix, the settings (`Settings.channel`), the
    KV bucket and durable (`bus.streams.channel_bucket`, `bus.durables.channel`)."""
    limits: Limits

    def receive(self) -> AsyncIterator[Delivery]:
        """Messages and presses as they come (long polling, a socket), reconnecting with
        backoff on errors, until cancelled."""
        ...

    async def typing(self, chat: Chat) -> None:
        """Show that the agent is working (Telegram's typing action, Slack's status)."""

    async def draft(self, chat: Chat, draft_id: int, text: str) -> bool:
        """Stream `text` natively (Telegram `sendMessageDraft`); False where the platform
        cannot here (the core then streams by editing a posted message)."""
        ...

    async def post(self, chat: Chat, text: str, buttons: Sequence[Button] = ()) -> str:
        """Post a message; its reference (to edit it later)."""
        ...

    async def edit(self, chat: Chat, ref: str, text: str, buttons: Sequence[Button] = ()) -> None:
        """Replace a posted message's text (and buttons); the same text again is no error."""

    async def answer_press(self, press: Press, text: str, *, alert: bool) -> None:
        """Answer a button press: a short notice, or (`alert`) a refusal only the presser sees."""

    async def download(self, file: File, max_bytes: int) -> bytes:
        """The bytes of a file a message carries. `TooLarge` when it is found to be over
        `max_bytes` (before fetching more than that), `PlatformError` when it cannot be
        fetched."""
        ...

    async def aclose(self) -> None:
        """Let go of the platform's connections."""


@runtime_checkable
class FindsPosts(Protocol):
    """A platform where a message the channel posted can be found again (Slack: a tag in
    the message's `metadata`, looked up in the conversation); optional. With it the core
    closes the one window a channel cannot close alone: killed after the platform accepted
    a post and before the channel recorded it, the restarted channel finds the message by
    its tag and edits it instead of posting again (`channels.posting`). Telegram bots
    cannot read a chat's history: Telegram does not implement it."""

    async def post_tagged(
        self, chat: Chat, text: str, tag: str, buttons: Sequence[Button] = ()
    ) -> str:
        """`Platform.post`, with `tag` (at most 64 characters of `[A-Za-z0-9:_-]`) stored
        with the message where `find_tagged` can see it."""
        ...

    async def find_tagged(self, chat: Chat, tag: str) -> str | None:
        """The reference of the message posted in `chat` with `tag`; None if there is none."""
        ...
