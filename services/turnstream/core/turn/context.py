"""Context providers, decided: when a turn asks for context, how their answers are
recorded, and how the recorded context enters every request of the turn.

    COMPOSE_REQUEST ▸ (the turn's first) ─► the shell asks the providers (GatherContext)
        ─► ContextProvided{provider, tokens, digest, content} per answer,
           ContextSkipped{provider, reason} per failure or timeout (a warning, never a
           failed turn) ─► COMPOSE_REQUEST ◂ ─► each request's system prompt carries them

The context is gathered once per turn and folded into the turn's state from the log, so a
replay composes the same requests without calling a provider again.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from turnstream.core.events import (
    ContextProvided,
    ContextProvidedData,
    ContextSkipped,
    ContextSkippedData,
    Event,
    Stage,
)
from turnstream.core.turn.builder import Builder
from turnstream.core.turn.state import ChatState, ContextBlock, Message, TurnConfig

SUMMARY_CHARS = 4000
"""The running summary keeps this much (the most recent part) of what compaction dropped."""
_LINE_CHARS = 200


@dataclass(frozen=True)
class ContextRequest:
    """What a context provider is asked for (remote ones get it as JSON)."""

    session_id: str
    turn_id: str
    iteration: int
    input: str
    """The text that started the turn."""
    summary: str
    """The session's running summary of what compaction dropped ("" before any)."""


@dataclass(frozen=True)
class Contributed:
    provider: str
    content: str
    truncated: bool = False
    volatile: bool = False


@dataclass(frozen=True)
class Skipped:
    provider: str
    reason: str
    timed_out: bool = False


ContextResult = Contributed | Skipped


def tokens(text: str) -> int:
    """Estimated tokens of `text` (characters / 4, rounded up): budgets count these."""
    return (len(text) + 3) // 4


def awaiting_context(state: ChatState, config: TurnConfig) -> ContextRequest | None:
    """The request for the providers when the turn waits for its context, else None."""
    turn = state.active
    if not config.context_providers or turn is None or turn.end or turn.abort:
        return None
    if turn.stage is not Stage.COMPOSE_REQUEST or not turn.stage_open or turn.context_gathered:
        return None
    first = state.history[turn.history_start] if turn.history_start < len(state.history) else None
    return ContextRequest(
        session_id=state.session_id,
        turn_id=turn.turn_id,
        iteration=turn.iteration,
        input=first.text if first is not None and first.role == "user" else "",
        summary=state.summary,
    )


def context_events(b: Builder, results: tuple[ContextResult, ...], iteration: int) -> list[Event]:
    """What the providers' answers are in the log, in the order given (priority order)."""
    events: list[Event] = []
    for result in results:
        match result:
            case Contributed(provider=name, content=content, truncated=cut, volatile=volatile):
                if not content:
                    continue  # nothing to add (e.g. no AGENTS.md in the workspace)
                digest = "sha256:" + hashlib.sha256(content.encode()).hexdigest()
                data = ContextProvidedData(
                    provider=name,
                    tokens=tokens(content),
                    digest=digest,
                    content=content,
                    truncated=cut,
                    volatile=volatile,
                    iteration=iteration,
                )
                events.append(b.make(ContextProvided, data))
            case Skipped(provider=name, reason=reason, timed_out=timed_out):
                skipped = ContextSkippedData(
                    provider=name, reason=reason[:500], timed_out=timed_out, iteration=iteration
                )
                events.append(b.make(ContextSkipped, skipped))
    return events


def with_context(system: str | None, context: tuple[ContextBlock, ...]) -> str | None:
    """The system prompt with the turn's stable context appended, one tagged block per
    provider (the volatile ones go to `volatile_context`)."""
    blocks = [_tagged(b) for b in context if not b.volatile]
    if not blocks:
        return system
    return "\n\n".join([*([system] if system else []), *blocks])


def volatile_context(context: tuple[ContextBlock, ...]) -> str | None:
    """The turn's volatile context, which a request carries at its end: after everything a
    prompt cache can keep, so a new time each turn does not make the model re-read the rest."""
    blocks = [_tagged(b) for b in context if b.volatile]
    return "\n\n".join(blocks) if blocks else None


def _tagged(block: ContextBlock) -> str:
    return f'<context provider="{block.provider}">\n{block.content}\n</context>'


def running_summary(previous: str, dropped: tuple[Message, ...], instead: str | None = None) -> str:
    """The running summary after compaction dropped `dropped`: a line per message (or
    `instead`, a compaction interceptor's summary of them), the newest kept when it grows
    past `SUMMARY_CHARS`."""
    lines = [previous] if previous else []
    if instead is not None:
        lines.append(instead)
        dropped = ()
    for message in dropped:
        text = " ".join(message.text.split())
        if len(text) > _LINE_CHARS:
            text = text[: _LINE_CHARS - 1] + "…"
        calls = ", ".join(c.name for c in message.tool_calls)
        lines.append(f"- {message.role}: {text}" + (f" [called {calls}]" if calls else ""))
    summary = "\n".join(lines)
    return summary[-SUMMARY_CHARS:]


@dataclass(frozen=True, slots=True)
class GatherContext:
    """Effect: ask the context providers for `request`; the answer is `ContextGathered`."""

    turn_id: str
    request: ContextRequest


@dataclass(frozen=True, slots=True)
class ContextGathered:
    """Input: the context providers' answers for a turn, in priority order."""

    turn_id: str
    results: tuple[ContextResult, ...]
