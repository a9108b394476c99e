"""The inbound decision, pure: a platform message or button press → a command to publish,
a refusal reply, a pairing code, a fresh session, or nothing.

    message ──► own or another bot's (not a bot chat) ──────────────► Ignore
            ──► group not allowed / no mention (when required) ─────► Ignore
            ──► DM: disabled ───────────────────────────────────────► Refuse
            ──► DM: not allowed, allowlist ─────────────────────────► Refuse
            ──► DM: not allowed, pairing ────────────────► Pair (a code; the open one again)
            ──► /new ──────────────────────────────────────────────► NewSession
            ──► /stop ─────────────────────────────────────────────► Publish(interrupt)
            ──► /start, /help ─────────────────────────────────────► Reply
            ──► anything else ─────────────────────────────────────► Publish(message)
    press   ──► no such prompt (or turn) ──────────────────────────► RefusePress
            ──► not the turn's sender nor an approver ─────────────► RefusePress
            ──► stop ──────────────────────────────────────────────► Publish(interrupt)
            ──► else ──────────────────────────────────────────────► Publish(answer)

The shell looks up what the decision needs (`Known`, `PromptOwner`) and performs what it
returns; a refusal is a reply to the sender, never a turn.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, assert_never

from turnstream.channels.platform import Chat, File, Incoming, Press
from turnstream.client import answer_command, message_command
from turnstream.core.commands import MAX_ATTACHMENTS, AttachmentPolicy
from turnstream.settings import ChannelSettings, SessionScope

HELP = (
    "Send a message to talk to the agent. /new starts a fresh conversation, "
    "/stop stops the reply being written."
)
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True)
class Known:
    """What the channel has stored about a message's sender and chat."""

    paired: bool = False
    """The sender was approved through pairing (`turnstream channels pairing approve`)."""
    generation: int = 0
    """How many times `/new` was said in this conversation (its session-id suffix)."""
    open_code: str | None = None
    """A pairing code already given to this sender and not expired."""


@dataclass(frozen=True)
class PromptOwner:
    """What the channel recorded when it posted an approval prompt."""

    session_id: str
    sender: str
    """Who sent the turn's input: they may answer its prompts."""


@dataclass(frozen=True)
class Ignore:
    reason: str


@dataclass(frozen=True)
class Reply:
    """A reply to the sender that starts no turn (a refusal, help)."""

    chat: Chat
    text: str


@dataclass(frozen=True)
class Pair:
    """Give the sender a pairing code (stored before the reply) and tell them."""

    chat: Chat
    user: str
    user_name: str
    code: str
    new: bool
    """False: the sender's open code, told again."""

    @property
    def text(self) -> str:
        return (
            f"I don't know you yet. Your pairing code is {self.code}: ask the owner to run "
            f"`turnstream channels pairing approve {self.code}`."
        )


@dataclass(frozen=True)
class NewSession:
    """`/new`: the conversation's next messages go to a fresh session."""

    chat: Chat
    base: str
    """The conversation's session id without its generation."""
    generation: int
    """The new generation (stored, then told)."""


@dataclass(frozen=True)
class Publish:
    """A command to publish to `<prefix>.in.<session>`; the platform is acknowledged after."""

    session_id: str
    command: dict[str, Any]
    files: tuple[File, ...] = ()
    """Files to fetch and put into the command's `attachments` before it is published."""


@dataclass(frozen=True)
class RefusePress:
    """A refusal only the presser sees."""

    text: str


@dataclass(frozen=True)
class AnswerPress:
    """Publish the answer, then tell the presser it was taken."""

    publish: Publish
    text: str


MessageDecision = Ignore | Reply | Pair | NewSession | Publish
PressDecision = RefusePress | AnswerPress


def base_session(platform: str, scope: SessionScope, chat: Chat, user: str) -> str:
    """The session id of a conversation before `/new`: one per thread, chat (or forum
    topic) or user, prefixed with the platform (the channel's sessions are those)."""
    match scope:
        case "thread":
            parts = [chat.id, chat.topic, chat.thread]
        case "chat":
            parts = [chat.id, chat.topic]
        case "user":
            parts = ["u", user]
        case _:
            assert_never(scope)
    tokens = [_UNSAFE.sub("_", p) for p in parts if p]
    return "-".join([platform, *tokens])[:120]


def session_of(base: str, generation: int) -> str:
    """The session a conversation is in after `generation` times `/new`."""
    return base if generation == 0 else f"{base}-g{generation}"


def owns(platform: str, session_id: str) -> bool:
    """Whether `session_id` is one of the channel of `platform`'s conversations (a
    sub-turn's child session, `<parent>:sub-…`, is not: its parent's reply is shown)."""
    return session_id.startswith(f"{platform}-") and ":" not in session_id


def command_word(text: str) -> str | None:
    """`/stop` of `/stop now`; None for text that is no command."""
    if not text.startswith("/"):
        return None
    return text.split(maxsplit=1)[0].lower()


def _allowed_group(policy: ChannelSettings, chat: Chat) -> bool:
    return "*" in policy.groups or chat.id in policy.groups


def decide_message(
    platform: str,
    policy: ChannelSettings,
    default_scope: SessionScope,
    msg: Incoming,
    known: Known,
    new_code: str,
    files: AttachmentPolicy | None = None,
) -> MessageDecision:
    """What to do with one message (`new_code`: the code to give if a stranger needs one;
    `files`: which files a message may carry, `Settings.attachment_policy`)."""
    if msg.from_self:
        return Ignore("own message")
    if msg.from_bot and msg.chat.id not in policy.bot_chats:
        return Ignore("from a bot (bot-loop protection)")
    if not msg.chat.private:
        if not _allowed_group(policy, msg.chat):
            return Ignore("group not allowed")
        if policy.require_mention and not msg.mentions_bot:
            return Ignore("no mention")
    elif policy.dm_policy == "disabled":
        return Reply(msg.chat, "Direct messages to this agent are turned off.")
    elif not (known.paired or msg.user in policy.allow_from or policy.dm_policy == "open"):
        if policy.dm_policy == "allowlist":
            return Reply(msg.chat, "You are not on this agent's list of people it talks to.")
        code = known.open_code or new_code
        return Pair(msg.chat, msg.user, msg.user_name, code, known.open_code is None)
    base = base_session(platform, policy.session_scope or default_scope, msg.chat, msg.user)
    session_id = session_of(base, known.generation)
    word = command_word(msg.text)
    if word == "/new":
        return NewSession(msg.chat, base, known.generation + 1)
    if word in ("/start", "/help"):
        return Reply(msg.chat, HELP)
    attached = msg.files if word is None else ()
    refusal = file_refusal(attached, files or AttachmentPolicy())
    if refusal is not None:
        return Reply(msg.chat, refusal)
    text = msg.text or " ".join(f"[{f.name}]" for f in attached)
    if not text:
        return Ignore("nothing in it (no text, no file)")
    command = message_command(
        session_id,
        text,
        chat_id=msg.chat.token(),
        sender_kind="agent" if msg.from_bot else "human",
        sender_id=msg.user,
        idempotency_key=msg.key,
    )
    if word == "/stop":
        del command["text"], command["replyTo"]
        return Publish(session_id, {**command, "type": "interrupt", "mode": "hard"})
    return Publish(session_id, command, attached)


def file_refusal(files: tuple[File, ...], policy: AttachmentPolicy) -> str | None:
    """Why a message's files are not taken, told to its sender; None: they are (a size the
    platform did not say is checked once fetched, `channels.files`)."""
    if len(files) > MAX_ATTACHMENTS:
        return (
            f"I take at most {MAX_ATTACHMENTS} files a message and this one has {len(files)}: "
            "nothing was sent to the agent; send them in more messages."
        )
    for f in files:
        why = policy.refusal(f.media_type, f.size)
        if why is not None:
            return not_taken(f.name, why)
    return None


def not_taken(name: str, why: str) -> str:
    """The reply to a sender whose file is refused: which, why, and that nothing was sent."""
    return f"I can't take {name}: {why}. Nothing was sent to the agent; send it again without it."


def decide_press(policy: ChannelSettings, press: Press, owner: PromptOwner | None) -> PressDecision:
    """What to do with a press of an approval prompt's button, or of a streamed reply's stop
    button (`owner`: the prompt's record, or the turn's)."""
    if owner is None:
        return RefusePress("This is no longer open.")
    if press.user != owner.sender and press.user not in policy.approvers:
        return RefusePress("Only the person who asked, or an approver, may answer this.")
    if press.decision == "stop":
        stop = {
            "type": "interrupt",
            "mode": "hard",
            "sessionId": owner.session_id,
            "chatId": press.chat.token(),
            "sender": {"kind": "human", "id": press.user},
            "idempotencyKey": f"stop-{press.interaction_id}",  # one stop per turn
        }
        return AnswerPress(Publish(owner.session_id, stop), "Stopping.")
    # one answer per prompt (its idempotencyKey): a second press or a re-delivery is a no-op
    command = answer_command(
        owner.session_id,
        press.interaction_id,
        press.decision,
        sender_id=press.user,
        reason=f"{press.decision} by {press.user_name} in chat",
    )
    command["chatId"] = press.chat.token()  # its InteractionAnswered comes back to this chat
    verb = "Approved" if press.decision == "approve" else "Denied"
    return AnswerPress(Publish(owner.session_id, command), f"{verb}.")
