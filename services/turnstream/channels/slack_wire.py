"""Slack's payloads as the channel core's values and back, pure: an Events API event → an
`Incoming`, a `block_actions` press → a `Press`, an approval prompt → Block Kit, a post's
identity → message `metadata` (and found again in a thread's history)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from turnstream.channels.platform import Button, Chat, Decision, File, Incoming, Press
from turnstream.channels.slack_mrkdwn import to_mrkdwn

JSON = dict[str, Any]
ACTION = "turnstream:"
"""The `action_id` prefix of the channel's buttons (`turnstream:approve`, `:deny`, `:stop`)."""
POSTED = "turnstream_posted"
"""The `event_type` of the metadata every post of the channel carries: its `event_payload`
names what was posted (`{"tag": ...}`), so a restarted channel finds a post it made and did
not get to record (`conversations.replies` with `include_all_metadata`)."""
_DECISIONS: dict[str, Decision] = {"approve": "approve", "deny": "deny", "stop": "stop"}
_STYLES = {"approve": "primary", "deny": "danger"}
_TAKEN_SUBTYPES = {None, "bot_message", "file_share", "thread_broadcast", "me_message"}
_COMMAND = re.compile(r"^\s*[/!](new|stop|start|help)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Me:
    """Who the bot is (`auth.test`)."""

    user_id: str
    bot_id: str
    team_id: str


def chat_of(channel: str, channel_type: str | None, thread_ts: str | None) -> Chat:
    """A Slack conversation as the core's chat: a DM (`im`) is private; the thread is the
    one a message is in, or the one it starts."""
    private = channel_type == "im" if channel_type else channel.startswith("D")
    return Chat(channel, private, thread=thread_ts)


def incoming(event: JSON, event_id: str, me: Me) -> Incoming | None:
    """The message an `events_api` event carries (None: not a message to consider: an edit,
    a deletion, a join). A user's message mentioning the bot comes twice (`message` and
    `app_mention`, two `event_id`s): both carry its `client_msg_id`, the key, so it is one
    turn."""
    if event.get("type") not in ("message", "app_mention"):
        return None
    if event.get("subtype") not in _TAKEN_SUBTYPES or not event.get("channel"):
        return None
    text = str(event.get("text") or "")
    mention = f"<@{me.user_id}>"
    user = str(event.get("user") or event.get("bot_id") or "")
    bot_id = event.get("bot_id")
    key = event.get("client_msg_id") or event_id
    thread = str(event.get("thread_ts") or event.get("ts") or "") or None
    return Incoming(
        key=f"slack-{me.team_id}-{key}",
        chat=chat_of(str(event["channel"]), event.get("channel_type"), thread),
        user=user,
        user_name=str((event.get("user_profile") or {}).get("name") or user),
        text=_command(" ".join(text.replace(mention, " ").split())),
        from_bot=bool(bot_id) or event.get("subtype") == "bot_message",
        from_self=bot_id == me.bot_id or user == me.user_id,
        mentions_bot=event.get("type") == "app_mention" or mention in text,
        files=files_of(event),
    )


def files_of(event: JSON) -> tuple[File, ...]:
    """The files a message shares (`files`, a `file_share`), fetched by their
    `url_private_download` with the bot token; a file Slack hides behind `files.info`
    (`file_access: check_file_info`) or has no URL for is left out."""
    found = []
    for f in event.get("files") or []:
        url = f.get("url_private_download") or f.get("url_private")
        if not url or f.get("file_access") == "check_file_info":
            continue
        name = str(f.get("name") or f.get("title") or f.get("id") or "file")
        media_type = str(f.get("mimetype") or "application/octet-stream")
        size = f.get("size")
        found.append(File(name, media_type, int(size) if size is not None else None, str(url)))
    return tuple(found)


SLASH_COMMANDS = ("/stop", "/new")
"""The slash commands the channel takes (registered in the app's manifest)."""


def slash(body: JSON, me: Me, thread: str | None) -> Incoming | None:
    """The message a slash command (`/stop`, `/new`) stands for. Slack's payload names the
    conversation, not a thread: `thread` is the one the user last wrote to the bot in there
    (their conversation, with the default `session_scope: thread`)."""
    command = str(body.get("command") or "").lower()
    channel, user = str(body.get("channel_id") or ""), str(body.get("user_id") or "")
    if command not in SLASH_COMMANDS or not channel or not user:
        return None
    return Incoming(
        key=f"slack-{me.team_id}-slash-{body.get('trigger_id') or ''}",
        chat=chat_of(channel, None, thread),
        user=user,
        user_name=str(body.get("user_name") or user),
        text=" ".join([command, str(body.get("text") or "")]).strip(),
        mentions_bot=True,  # a slash command is said to the app, in a channel too
    )


def _command(text: str) -> str:
    """`!new` as `/new` (Slack's composer takes a leading `/` for its own slash commands)."""
    found = _COMMAND.match(text)
    return f"/{found.group(1).lower()}{text[found.end() :]}" if found else text


def press(body: JSON) -> Press | None:
    """The press a `block_actions` payload carries (None: not one of the channel's
    buttons)."""
    if body.get("type") != "block_actions" or not body.get("actions"):
        return None
    action = body["actions"][0]
    action_id = str(action.get("action_id", ""))
    decision = action_id.removeprefix(ACTION)
    if not action_id.startswith(ACTION) or decision not in _DECISIONS:
        return None
    container = body.get("container") or {}
    channel = str(container.get("channel_id") or (body.get("channel") or {}).get("id") or "")
    thread = container.get("thread_ts") or container.get("message_ts")
    user = body.get("user") or {}
    return Press(
        key=f"slack-press-{container.get('message_ts')}-{action.get('action_ts')}",
        chat=chat_of(channel, None, thread),
        user=str(user.get("id", "")),
        user_name=str(user.get("username") or user.get("name") or user.get("id", "")),
        interaction_id=str(action.get("value", "")),
        decision=_DECISIONS[decision],
        ref=f"{channel}|{user.get('id', '')}|{thread or ''}",
    )


def press_target(ref: str) -> tuple[str, str, str | None]:
    """`(channel, user, thread_ts)` of a press's `ref`."""
    channel, user, thread = ref.split("|")
    return channel, user, thread or None


def blocks(text: str, buttons: Sequence[Button]) -> list[JSON]:
    """A message as Block Kit: the text as one mrkdwn section, the buttons below it."""
    section: JSON = {"type": "section", "text": {"type": "mrkdwn", "text": to_mrkdwn(text)}}
    if not buttons:
        return [section]
    elements = [
        {
            "type": "button",
            "action_id": f"{ACTION}{b.decision}",
            "text": {"type": "plain_text", "text": b.label, "emoji": True},
            "value": b.interaction_id,
            **({"style": _STYLES[b.decision]} if b.decision in _STYLES else {}),
        }
        for b in buttons
    ]
    return [section, {"type": "actions", "block_id": "turnstream_buttons", "elements": elements}]


def metadata(tag: str) -> JSON:
    """The metadata of a post tagged `tag` (`FindsPosts`)."""
    return {"event_type": POSTED, "event_payload": {"tag": tag}}


def posted_with(messages: Iterable[JSON], tag: str, bot_id: str) -> str | None:
    """The `ts` of the bot's message in `messages` (a thread's history) tagged `tag`."""
    for message in messages:
        meta = message.get("metadata") or {}
        payload = meta.get("event_payload") or {}
        if (
            message.get("bot_id") == bot_id
            and meta.get("event_type") == POSTED
            and payload.get("tag") == tag
        ):
            return str(message["ts"])
    return None
