"""`turnstream send`'s screen: stages and tokens as they come, approval prompts inline.

An approval prompt never blocks the reading of the log: it runs beside it, so an answer
given elsewhere (`turnstream approve` in another terminal) ends the prompt at once. Time
spent waiting for a person is neither part of the reported turn time nor of `--timeout`.
Ctrl-C stops watching, never the turn: it says what goes on and how to act on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError
from rich.markup import escape

from turnstream.bus import Bus
from turnstream.bus.permissions import PermissionDenied
from turnstream.cli.common import Interrupted, command_name, console, err, run_on_bus
from turnstream.cli.prompt import PROMPT_WAITING, Deadline, Prompts, Source, answer_source
from turnstream.cli.render import event_line
from turnstream.cli.roles import explain
from turnstream.client import TurnOutcome, publish_command, send_and_wait
from turnstream.core.commands import COMMAND_ADAPTER
from turnstream.core.events import (
    ContextSkipped,
    Event,
    FollowUpQueued,
    HookDecided,
    InputRejected,
    InteractionRequested,
    ProviderFallback,
    Stage,
    StagePreFired,
    ToolCallDenied,
    ToolInvocationFailed,
    ToolInvocationProposed,
    ToolInvocationSucceeded,
)
from turnstream.settings import Settings


@dataclass
class SendScreen:
    session: str
    quiet: bool
    source: Source
    timeout: float
    streamed: list[str] = field(default_factory=list)
    shown: set[tuple[str, int]] = field(default_factory=set)
    prompts: Prompts = field(init=False)
    deadline: Deadline = field(default_factory=Deadline)

    def __post_init__(self) -> None:
        out = err if self.quiet else console
        self.prompts = Prompts(self.session, self.source, out=out, on_wait=self.on_wait)

    # what the log says ---------------------------------------------------------------
    def on_event(self, event: Event, bus: Bus) -> Awaitable[None] | None:
        self.prompts.see(event, bus)  # a prompt is asked beside the log's reading
        if isinstance(event, ContextSkipped):
            self.end_tokens()
            skip = event.data
            skipped = f"context provider {escape(skip.provider)} skipped: {escape(skip.reason)}"
            err.print(f"[yellow]warning:[/] {skipped}")
        elif isinstance(event, ProviderFallback):
            self.end_tokens()  # a warning on stderr even with --quiet: the answer's model changed
            d = event.data
            err.print(
                f"[yellow]warning:[/] model {escape(d.from_)} failed ({escape(d.reason)}); "
                f"continuing on the fallback {escape(d.to)}"
            )
        if self.quiet:
            return None
        if isinstance(event, StagePreFired):
            self.stage_line(event.data.stage, event.data.iteration)
        elif isinstance(event, ToolInvocationProposed):
            args = ", ".join(f"{k}={v!r}" for k, v in event.data.args.items())
            console.print(f"  [cyan]⚙ {event.data.tool}[/]({escape(args)})")
        elif isinstance(
            event,
            InputRejected
            | FollowUpQueued
            | ToolCallDenied
            | ToolInvocationFailed
            | ToolInvocationSucceeded
            | HookDecided,
        ):
            console.print(event_line(event))
        return None

    def on_delta(self, delta: str) -> None:
        if self.quiet:
            return
        rounds = [i for stage, i in self.shown if stage == Stage.SEND_REQUEST]
        self.stage_line(Stage.STREAM_RESPONSE, max(rounds, default=1))
        self.streamed.append(delta)
        console.print(delta, end="", style="bold")

    def stage_line(self, stage: str, iteration: int) -> None:
        if (stage, iteration) in self.shown:
            return
        self.shown.add((stage, iteration))
        self.end_tokens()
        suffix = f" (round {iteration})" if iteration > 1 else ""
        console.print(f"[dim]▸ {stage}{suffix}[/]")

    def end_tokens(self) -> None:
        if self.streamed:
            console.print()
            self.streamed.clear()

    # the bounded wait, paused while a person decides ---------------------------------
    def on_wait(self, waiting: bool) -> None:
        if waiting:
            self.end_tokens()
        self.deadline.paused(waiting)

    # ending --------------------------------------------------------------------------
    def interrupted(self) -> str:
        """What to tell a user who pressed Ctrl-C: the turn goes on; how to act on it."""
        s, ts = self.session, command_name()
        lines = ["[yellow]stopped watching; the turn goes on[/] (Ctrl-C does not stop it)."]
        for prompt in self.prompts.open.values():
            d = prompt.data
            args = ", ".join(f"{k}={v!r}" for k, v in d.args.items())
            lines.append(f"  waiting for approval: {escape(d.tool)}({escape(args)})")
            lines.append(f"    approve: {ts} approve {d.interaction_id}")
            lines.append(f"    deny:    {ts} deny {d.interaction_id}")
            lines.append(f"    (denied at {d.deadline:%H:%M:%S} UTC if nobody answers)")
        lines.append(f"  follow it:  {ts} tail {s}")
        lines.append(f"  stop it:    {ts} interrupt {s}   (--hard: at once)")
        lines.append(f"  afterwards: {ts} replay {s}")
        return "\n".join(lines)


def require_valid(command: dict[str, Any]) -> None:
    """Exit 2 naming each problem when the contract refuses `command`, as HTTP does."""
    try:
        COMMAND_ADAPTER.validate_python(command)
    except ValidationError as exc:
        for error in exc.errors(include_url=False):
            where = ".".join(str(p) for p in error["loc"][1:]) or "the message"
            err.print(f"[red]error:[/] {escape(where)}: {escape(error['msg'])}")
        err.print("nothing was sent")
        raise typer.Exit(2) from None


@dataclass(frozen=True)
class Unfollowed:
    """Sent, but this NATS user may not read the session's log to follow its turn."""

    seq: int
    why: PermissionDenied


def run_send(
    settings: Settings,
    command: dict[str, Any],
    *,
    quiet: bool,
    timeout: float,
) -> None:
    """Send `command`, show its turn, exit 0 when it completed, 1 when not, 130 on Ctrl-C;
    a command the contract refuses exits 2 unsent (else its rejection would be the
    session's failed turn)."""
    require_valid(command)
    session = command["sessionId"]
    screen = SendScreen(session, quiet, answer_source(quiet), timeout)
    started = time.perf_counter()

    try:
        work = partial(_follow, command=command, screen=screen, timeout=timeout)
        outcome = run_on_bus(settings, work, stop_when_refused=False)
    except TimeoutError:
        screen.end_tokens()
        err.print(
            f"\n[yellow]no terminal event within {timeout:g} s[/] (not counting time spent "
            f"waiting for your approval); the turn may still be running: "
            f"`turnstream tail {session}` follows it"
        )
        raise typer.Exit(1) from None
    except Interrupted:
        console.print()
        err.print(screen.interrupted())
        raise
    if isinstance(outcome, InteractionRequested):  # nobody here can answer: said so
        raise typer.Exit(PROMPT_WAITING)
    if isinstance(outcome, Unfollowed):
        console.print(f"[green]✔ sent[/] [dim]inbound seq {outcome.seq}[/]")
        err.print(f"[yellow]not followed:[/] {escape(explain(outcome.why))}")
        return
    _show_outcome(outcome, screen, quiet, started)


async def _follow(
    bus: Bus, command: dict[str, Any], screen: SendScreen, timeout: float
) -> TurnOutcome | Unfollowed | InteractionRequested:
    """Send `command` and follow its turn on `screen` until it ends, or a prompt nobody
    here can answer is left waiting (`Prompts.stuck`)."""
    stuck = screen.prompts.stuck()
    try:
        async with asyncio.timeout(timeout) as screen.deadline.timeout:
            following = asyncio.ensure_future(
                send_and_wait(
                    bus,
                    command,
                    on_event=lambda event: screen.on_event(event, bus),
                    on_delta=screen.on_delta,
                    timeout=None,
                )
            )
            try:
                either: set[asyncio.Future[Any]] = {following, stuck}
                await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not following.done():
                    following.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await following
            if following.done() and not following.cancelled():
                return following.result()
            return stuck.result()
    except PermissionDenied as denied:
        if denied.action != "subscription":
            raise
        # a user that may send commands but not read the log (`client`): send it only
        return Unfollowed(await publish_command(bus, command["sessionId"], command), denied)
    finally:
        screen.deadline.timeout = None  # exited: a prompt ending now must not touch it
        await screen.prompts.close()


def _show_outcome(outcome: TurnOutcome, screen: SendScreen, quiet: bool, started: float) -> None:
    """How the followed turn ended: its reply or a line that says so; exit 1 when it did
    not complete."""
    elapsed = (time.perf_counter() - started - screen.prompts.waited_s) * 1000
    screen.end_tokens()
    if outcome.completed:
        if quiet:
            console.print(outcome.reply or "")
        else:
            waited_s = screen.prompts.waited_s
            waited = f" (+ {waited_s:.1f} s waiting for approval)" if waited_s else ""
            console.print(
                f"[green]✔ completed[/] [dim]turn {outcome.turn_id} · {elapsed:.0f} ms{waited}[/]"
            )
        return
    failure = escape(f"[{outcome.failure_class}] {outcome.reason}")
    err.print(f"[red]✘ {outcome.status}[/] {failure}")
    if outcome.failure_class == "invalid_input":  # the wire's advice, said for the CLI
        err.print("[yellow]next:[/] fix what the error names and run the command again")
    elif outcome.next_action:
        err.print(f"[yellow]next:[/] {escape(outcome.next_action)}")
    raise typer.Exit(1)


def message_of(
    session: str,
    text: str,
    chat: str | None,
    sender: str,
    key: str | None,
    reply_to: str | None,
    steer: bool,
    agent: str | None,
    attach: list[Path] | None,
) -> dict[str, Any]:
    """`turnstream send`'s inbound command (its options as the CLI takes them)."""
    from turnstream.client import message_command

    kind, _, sender_id = sender.partition(":")
    command = message_command(
        session,
        text,
        chat_id=chat,
        sender_kind=kind,
        sender_id=sender_id or kind,
        idempotency_key=key,
        reply_to=reply_to,
        kind="steer" if steer else "message",
        agent=agent,
    )
    if attach:
        command["attachments"] = attachments_of(attach)
    return command


def attachments_of(paths: list[Path]) -> list[dict[str, Any]]:
    """`--attach` files as inline attachments, or exit 2 naming the one that cannot go."""
    import mimetypes

    from turnstream.client import attachment
    from turnstream.core.commands import INLINE_MAX_BYTES

    found = []
    for path in paths:
        try:
            data = path.read_bytes()
        except OSError as exc:
            err.print(f"[red]error:[/] cannot read --attach {path}: {exc}; nothing was sent")
            raise typer.Exit(2) from exc
        if len(data) > INLINE_MAX_BYTES:
            err.print(
                f"[red]error:[/] --attach {path} has {len(data):,} bytes; the command line sends "
                f"up to {INLINE_MAX_BYTES:,} inline (put larger files into the object store "
                "as att/<sha256>, docs/contract.md#attachments); nothing was sent"
            )
            raise typer.Exit(2)
        media_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        found.append(attachment(path.name, media_type, data))
    return found
