"""The fake Slack's Web API methods: each takes the parsed arguments and answers the fields
Slack answers beside `"ok": true`, or raises `SlackError(code)` with Slack's error code."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.channels.fake_slack import FakeSlack, Message

JSON = dict[str, Any]


class SlackError(Exception):
    """Answered as `{"ok": false, "error": code}`."""

    def __init__(self, code: str, status: int = 200) -> None:
        super().__init__(code)
        self.code, self.status = code, status
        """Slack answers its errors with HTTP 200; a 5xx when it is in trouble."""


def required(args: JSON, name: str) -> str:
    value = args.get(name)
    if not value:
        raise SlackError("invalid_arguments")
    return str(value)


def _flag(args: JSON, name: str) -> bool:
    return str(args.get(name, "")).lower() in ("1", "true")


def _metadata(args: JSON) -> JSON | None:
    metadata = args.get("metadata")
    if metadata is None:
        return None
    if not isinstance(metadata, dict) or "event_type" not in metadata:
        raise SlackError("invalid_metadata_format")
    return {"event_type": metadata["event_type"], "event_payload": metadata.get("event_payload")}


def _text(args: JSON) -> str:
    """The text of a post: `text`, `markdown_text` or the markdown chunks."""
    parts = [str(args.get("text") or ""), str(args.get("markdown_text") or "")]
    for chunk in args.get("chunks") or []:
        if chunk.get("type") == "markdown_text":
            parts.append(str(chunk.get("text", "")))
    return "".join(parts)


def _own(slack: FakeSlack, args: JSON) -> Message:
    message = slack._message_or_error(args)
    if message.bot_id != slack.bot_id:
        raise SlackError("cant_update_message")
    return message


def auth_test(slack: FakeSlack, args: JSON, token: str) -> JSON:
    return {
        "url": "https://fake.slack.com/",
        "team": "Fake",
        "user": "turnstream",
        "team_id": slack.team_id,
        "user_id": slack.bot_user,
        "bot_id": slack.bot_id,
        "is_enterprise_install": False,
    }


def connections_open(slack: FakeSlack, args: JSON, token: str) -> JSON:
    return {"url": f"ws://127.0.0.1:{slack.port}/link/?ticket={uuid.uuid4()}&app_id={slack.app_id}"}


def post_message(slack: FakeSlack, args: JSON, token: str) -> JSON:
    channel = required(args, "channel")
    if not (_text(args) or args.get("blocks")):
        raise SlackError("no_text")
    message = slack._store(
        channel,
        _text(args),
        slack.bot_user,
        thread_ts=args.get("thread_ts") or None,
        bot_id=slack.bot_id,
        blocks=args.get("blocks"),
        metadata=_metadata(args),
    )
    slack._bot_posted(message)
    return {"channel": channel, "ts": message.ts, "message": message.wire()}


def update(slack: FakeSlack, args: JSON, token: str) -> JSON:
    message = _own(slack, args)
    if not (_text(args) or args.get("blocks")):
        raise SlackError("no_text")
    message.text = _text(args)
    if "blocks" in args:
        message.blocks = args["blocks"] or None
    if "metadata" in args:
        message.metadata = _metadata(args)
    message.edits += 1
    return {
        "channel": message.channel,
        "ts": message.ts,
        "text": message.text,
        "message": message.wire(),
    }


def start_stream(slack: FakeSlack, args: JSON, token: str) -> JSON:
    channel = required(args, "channel")
    thread_ts = required(args, "thread_ts")
    if not channel.startswith("D"):
        if not args.get("recipient_team_id"):
            raise SlackError("missing_recipient_team_id")
        if not args.get("recipient_user_id"):
            raise SlackError("missing_recipient_user_id")
    message = slack._store(
        channel,
        _text(args),
        slack.bot_user,
        thread_ts=thread_ts,
        bot_id=slack.bot_id,
        streaming=True,
    )
    slack._bot_posted(message)
    return {"channel": channel, "ts": message.ts}


def append_stream(slack: FakeSlack, args: JSON, token: str) -> JSON:
    message = _own(slack, args)
    if not message.streaming:
        raise SlackError("message_not_in_streaming_state")
    if not _text(args):
        raise SlackError("no_text")
    message.text += _text(args)
    return {"channel": message.channel, "ts": message.ts}


def stop_stream(slack: FakeSlack, args: JSON, token: str) -> JSON:
    message = _own(slack, args)
    if not message.streaming:
        raise SlackError("message_not_in_streaming_state")
    message.text += _text(args)
    message.streaming = False
    if args.get("blocks"):
        message.blocks = args["blocks"]
    if "metadata" in args:
        message.metadata = _metadata(args)
    return {"channel": message.channel, "ts": message.ts, "message": message.wire()}


def set_status(slack: FakeSlack, args: JSON, token: str) -> JSON:
    channel = required(args, "channel_id")
    thread_ts = required(args, "thread_ts")
    if "status" not in args:
        raise SlackError("invalid_arguments")
    slack.find_root(channel, thread_ts)
    slack.statuses.append({"channel_id": channel, "thread_ts": thread_ts, "status": args["status"]})
    return {}


def replies(slack: FakeSlack, args: JSON, token: str) -> JSON:
    channel, ts = required(args, "channel"), required(args, "ts")
    if channel not in slack.messages:
        raise SlackError("channel_not_found")
    root = slack.find_root(channel, ts)
    thread = [root] + [m for m in slack.messages[channel] if m.thread_ts == ts and m is not root]
    start = int(args.get("cursor") or 0)
    limit = int(args.get("limit") or 1000)
    page = thread[start : start + limit]
    more = start + limit < len(thread)
    with_metadata = _flag(args, "include_all_metadata")
    return {
        "messages": [m.wire(with_metadata=with_metadata) for m in page],
        "has_more": more,
        "response_metadata": {"next_cursor": str(start + limit) if more else ""},
    }


def post_ephemeral(slack: FakeSlack, args: JSON, token: str) -> JSON:
    channel, user = required(args, "channel"), required(args, "user")
    if channel not in slack.messages:
        raise SlackError("channel_not_found")
    if not (_text(args) or args.get("blocks")):
        raise SlackError("no_text")
    ts = slack._ts()
    slack.ephemeral.append({"channel": channel, "user": user, "text": _text(args), "ts": ts})
    return {"message_ts": ts}


def reactions_add(slack: FakeSlack, args: JSON, token: str) -> JSON:
    message = slack._message_or_error({"channel": args.get("channel"), "ts": args.get("timestamp")})
    name = required(args, "name")
    if any(r["ts"] == message.ts and r["name"] == name for r in slack.reactions):
        raise SlackError("already_reacted")
    slack.reactions.append({"channel": message.channel, "ts": message.ts, "name": name})
    return {}


METHODS: dict[str, Callable[[FakeSlack, JSON, str], JSON]] = {
    "auth.test": auth_test,
    "apps.connections.open": connections_open,
    "chat.postMessage": post_message,
    "chat.update": update,
    "chat.startStream": start_stream,
    "chat.appendStream": append_stream,
    "chat.stopStream": stop_stream,
    "assistant.threads.setStatus": set_status,
    "conversations.replies": replies,
    "chat.postEphemeral": post_ephemeral,
    "reactions.add": reactions_add,
}
