"""The outbound decider, pure: what a chat shows of its sessions' turns.

Inputs come from the log (through the channel's durable), the live tokens and a clock tick;
effects are what the shell performs on the platform (`channels.service`):

    input                              effects
    Started (SessionTurnStart)         Track, Typing
    Resumed (tokens after a restart)   Typing (and on every Tick; no stream: see TurnView)
    Delta (ts.live token)              Stream, at most once per `stream_interval_s`
    Activity (ToolInvocationRequested) Stream (the reply so far and a status line), throttled
    Asked (InteractionRequested)       Prompt (the question with approve/deny buttons)
    Settled (InteractionAnswered)      ClosePrompt (the buttons replaced by the decision)
    Ended (TurnEnded)                  Final (the reply split to the platform's limit)
    Tick (every second or so)          Typing every `typing_every_s`, a Stream held back

Exactly once is the shell's (`channels.posting`): every message a `Stream`, `Final` or
`Prompt` posts is recorded before and after it is posted, so performing an effect again
(a restart) edits what was posted instead of posting it again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import assert_never

from turnstream.channels.platform import Button, Chat
from turnstream.channels.text import (
    STATUS_CHARS,
    ended_text,
    prompt_text,
    split_text,
    tool_line,
)
from turnstream.core.events import (
    Event,
    InteractionAnswered,
    InteractionRequested,
    SessionTurnStart,
    ToolInvocationRequested,
    TurnEnded,
)


@dataclass(frozen=True)
class Pacing:
    text_limit: int
    stream_interval_s: float
    typing_every_s: float


@dataclass(frozen=True)
class TurnView:
    """A turn being shown."""

    session_id: str
    turn_id: str
    chat: Chat
    text: str = ""
    """The reply so far, from the live tokens."""
    status: str | None = None
    """The tool call running now, as a status line."""
    shown: str = ""
    shown_at: float = -math.inf
    typed_at: float = -math.inf
    resumed: bool = False
    """Taken up after a restart, mid-turn: the tokens before it are gone, so the stream is
    not updated (it would show the reply from its middle); the final reply completes it."""

    def streamed(self, limit: int) -> str:
        """What the streamed message shows: the reply so far (its first part) and the
        status line."""
        room = limit - min(STATUS_CHARS + 2, limit // 2)  # the status line's room
        body = self.text if len(self.text) <= room else self.text[: room - 1] + "…"
        return "\n\n".join(p for p in (body.strip(), self.status) if p)


@dataclass(frozen=True)
class Started:
    session_id: str
    turn_id: str
    chat: Chat
    sender: str


@dataclass(frozen=True)
class Resumed:
    """Tokens of a turn this process has not seen start (it restarted mid-turn), whose
    record says it is not done."""

    session_id: str
    turn_id: str
    chat: Chat


@dataclass(frozen=True)
class Delta:
    turn_id: str
    text: str


@dataclass(frozen=True)
class Activity:
    turn_id: str
    line: str


@dataclass(frozen=True)
class Asked:
    session_id: str
    turn_id: str
    chat: Chat
    interaction_id: str
    text: str


@dataclass(frozen=True)
class Settled:
    chat: Chat
    interaction_id: str
    text: str


@dataclass(frozen=True)
class Ended:
    session_id: str
    turn_id: str
    chat: Chat
    text: str
    interrupted: bool = False
    """Stopped (`/stop`, the stop button): what was streamed stays, marked stopped."""


@dataclass(frozen=True)
class Tick:
    pass


Input = Started | Resumed | Delta | Activity | Asked | Settled | Ended | Tick


@dataclass(frozen=True)
class Track:
    """Record the turn (its chat and sender) before anything of it is posted."""

    session_id: str
    turn_id: str
    chat: Chat
    sender: str


@dataclass(frozen=True)
class Typing:
    chat: Chat


@dataclass(frozen=True)
class Stream:
    """Show the reply so far: natively (a draft) where the platform can, else in the turn's
    first message (posted once, then edited)."""

    turn_id: str
    chat: Chat
    text: str


@dataclass(frozen=True)
class Final:
    """The reply, in parts within the platform's limit: the first in the turn's first
    message (edited if the stream posted it), the others posted after it."""

    turn_id: str
    chat: Chat
    parts: tuple[str, ...]


@dataclass(frozen=True)
class Prompt:
    session_id: str
    turn_id: str
    chat: Chat
    interaction_id: str
    text: str
    buttons: tuple[Button, ...]


@dataclass(frozen=True)
class ClosePrompt:
    chat: Chat
    interaction_id: str
    text: str


Effect = Track | Typing | Stream | Final | Prompt | ClosePrompt
Views = Mapping[str, TurnView]


def input_of(event: Event) -> Input | None:
    """The decider's input for a log event of the channel's (None: nothing to show, or a
    chatId no channel wrote)."""
    chat = Chat.parse(event.chat_id)
    if chat is None:
        return None
    if isinstance(event, InteractionAnswered):  # an answer is the session's, not a turn's
        verb = "Approved" if event.data.decision == "approve" else "Denied"
        return Settled(chat, event.data.interaction_id, f"{verb} by {event.data.sender.id}.")
    if event.turn_id is None:
        return None
    if isinstance(event, SessionTurnStart):
        return Started(event.session_id, event.turn_id, chat, event.data.sender.id)
    if isinstance(event, ToolInvocationRequested):
        return Activity(event.turn_id, tool_line(event.data.tool, event.data.args))
    if isinstance(event, InteractionRequested):
        text = prompt_text(event.data.tool, event.data.args, event.data.prompt)
        return Asked(event.session_id, event.turn_id, chat, event.data.interaction_id, text)
    if isinstance(event, TurnEnded):
        d = event.data
        text = ended_text(d.status, d.reply, d.failure_class, d.reason, d.next_action)
        stopped = d.failure_class == "interrupted"
        return Ended(event.session_id, event.turn_id, chat, text, stopped)
    return None


def _stream(view: TurnView, now: float, pacing: Pacing) -> tuple[TurnView, list[Effect]]:
    text = view.streamed(pacing.text_limit)
    if (
        view.resumed
        or not text
        or text == view.shown
        or now - view.shown_at < pacing.stream_interval_s
    ):
        return view, []
    return replace(view, shown=text, shown_at=now), [Stream(view.turn_id, view.chat, text)]


def decide_outbound(
    views: Views, given: Input, now: float, pacing: Pacing
) -> tuple[dict[str, TurnView], list[Effect]]:
    """The turns being shown after `given`, and what to do on the platform."""
    out = dict(views)
    match given:
        case Started(session_id, turn_id, chat, sender):
            out[turn_id] = TurnView(session_id, turn_id, chat, typed_at=now)
            return out, [Track(session_id, turn_id, chat, sender), Typing(chat)]
        case Resumed(session_id, turn_id, chat):
            if turn_id in out:
                return out, []
            out[turn_id] = TurnView(session_id, turn_id, chat, typed_at=now, resumed=True)
            return out, [Typing(chat)]
        case Delta(turn_id, text):
            if turn_id not in out:
                return out, []
            view = replace(out[turn_id], text=out[turn_id].text + text, status=None)
            out[turn_id], streamed = _stream(view, now, pacing)
            return out, streamed
        case Activity(turn_id, line):
            if turn_id not in out:
                return out, []
            out[turn_id], streamed = _stream(replace(out[turn_id], status=line), now, pacing)
            return out, streamed
        case Asked(session_id, turn_id, chat, interaction_id, text):
            buttons = (
                Button("✅ Approve", interaction_id, "approve"),
                Button("❌ Deny", interaction_id, "deny"),
            )
            return out, [Prompt(session_id, turn_id, chat, interaction_id, text, buttons)]
        case Settled(chat, interaction_id, text):
            return out, [ClosePrompt(chat, interaction_id, text)]
        case Ended(_, turn_id, chat, text, interrupted):
            was = out.pop(turn_id, None)
            if interrupted and was is not None and was.text.strip() and not was.resumed:
                text = f"{was.text.strip()}\n\n⏹ Stopped."
            return out, [Final(turn_id, chat, tuple(split_text(text, pacing.text_limit)))]
        case Tick():
            ticked: list[Effect] = []
            for turn_id, view in views.items():
                if now - view.typed_at >= pacing.typing_every_s:
                    view = replace(view, typed_at=now)
                    ticked.append(Typing(view.chat))
                out[turn_id], streamed = _stream(view, now, pacing)
                ticked += streamed
            return out, ticked
        case _:
            assert_never(given)
