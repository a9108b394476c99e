"""`turnstream send`'s screen: stages and tokens as they come, approval prompts inline.

An approval prompt never blocks the reading of the log: it runs beside it, so an answer
given elsewhere (`turnstream approve` in another terminal) ends the prompt at once. Time
spent waiting for a person is neither part of the reported turn time nor of `--timeout`.
Ctrl-C stops watching, never the turn: it says what goes on and how to act on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import termios
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

import typer
from rich.markup import escape

from turnstream.bus import Bus
from turnstream.bus.permissions import PermissionDenied
from turnstream.cli.common import command_name, console, err, run_on_bus
from turnstream.cli.render import event_line
from turnstream.client import TurnOutcome, answer_command, publish_command, send_and_wait
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
    ToolCallApproved,
    ToolCallDenied,
    ToolInvocationFailed,
    ToolInvocationProposed,
    ToolInvocationSucceeded,
)
from turnstream.settings import Settings


async def read_line() -> str:
    """One line from stdin without a thread, so waiting for it can be cancelled."""
    loop = asyncio.get_running_loop()
    line: asyncio.Future[str] = loop.create_future()
    fd = sys.stdin.fileno()

    def ready() -> None:
        if not line.done():
            line.set_result(sys.stdin.readline())

    loop.add_reader(fd, ready)
    try:
        return await line
    finally:
        loop.remove_reader(fd)


def _forget_typed_input() -> None:
    """Drop what the user half-typed at a prompt that was answered elsewhere (else the
    shell would run it after we exit)."""
    with contextlib.suppress(termios.error, OSError, ValueError):
        termios.tcflush(sys.stdin.fileno(), termios.TCIFLUSH)


@dataclass
class SendScreen:
    session: str
    quiet: bool
    interactive: bool
    timeout: float
    streamed: list[str] = field(default_factory=list)
    shown: set[tuple[str, int]] = field(default_factory=set)
    prompts: dict[str, InteractionRequested] = field(default_factory=dict)
    """Open prompts of this turn, by invocation id."""
    answered: dict[str, asyncio.Future[str]] = field(default_factory=dict)
    """Invocation id → how it was answered, once the log says so."""
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    waited_s: float = 0.0
    """Time spent waiting for a person's answer (not the turn's own time)."""
    deadline: asyncio.Timeout | None = None
    remaining_s: float = 0.0
    """What was left of `--timeout` when a prompt paused it."""

    # what the log says ---------------------------------------------------------------
    def on_event(self, event: Event, bus: Bus) -> Awaitable[None] | None:
        if isinstance(event, InteractionRequested):
            self.prompts[event.data.invocation_id] = event
            self._spawn(self.ask(bus, event))
        elif isinstance(event, ToolCallApproved | ToolCallDenied):
            self._settled(event)
        elif isinstance(event, ContextSkipped):
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

    def _settled(self, event: ToolCallApproved | ToolCallDenied) -> None:
        invocation = event.data.invocation_id
        self.prompts.pop(invocation, None)
        verdict = "approved" if isinstance(event, ToolCallApproved) else "denied"
        by = event.data.answered_by
        how = f"{verdict} by {by.kind}:{by.id}" if by else verdict
        future = self.verdict(invocation)
        if not future.done():
            future.set_result(how)

    def verdict(self, invocation: str) -> asyncio.Future[str]:
        if invocation not in self.answered:
            self.answered[invocation] = asyncio.get_running_loop().create_future()
        return self.answered[invocation]

    def _spawn(self, work: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    # the prompt ----------------------------------------------------------------------
    async def ask(self, bus: Bus, prompt: InteractionRequested) -> None:
        data = prompt.data
        elsewhere = self.verdict(data.invocation_id)
        if elsewhere.done():  # answered before we could even ask
            return
        self.end_tokens()
        asked_at = time.perf_counter()
        self.pause_deadline()
        try:
            if not self.interactive:
                console.print(
                    f"[yellow]? approval needed:[/] {escape(data.prompt)} "
                    f"— answer with `turnstream approve {data.interaction_id}` (or deny)"
                )
                await elsewhere
                return
            console.print(f"? {escape(data.prompt)} \\[y/N] ", end="")
            typed = asyncio.ensure_future(read_line())
            done, _ = await asyncio.wait({typed, elsewhere}, return_when=asyncio.FIRST_COMPLETED)
            if typed in done:
                reply = typed.result()
                decision = "approve" if reply.strip().lower() in ("y", "yes") else "deny"
                if not reply.endswith("\n"):
                    console.print()  # end of input (Ctrl-D): the answer is the default
                command = answer_command(self.session, data.interaction_id, decision)
                await publish_command(bus, self.session, command)
                await elsewhere  # the approval service's verdict, before the turn goes on
            else:
                typed.cancel()
                _forget_typed_input()
                console.print(f"\n[dim]answered elsewhere: {elsewhere.result()}[/]")
        finally:
            self.waited_s += time.perf_counter() - asked_at
            self.resume_deadline()

    # the bounded wait, paused while a person decides ---------------------------------
    def pause_deadline(self) -> None:
        when = self.deadline.when() if self.deadline is not None else None
        if self.deadline is not None and when is not None:
            self.remaining_s = max(0.0, when - asyncio.get_running_loop().time())
            self.deadline.reschedule(None)

    def resume_deadline(self) -> None:
        waiting = any(not f.done() for f in self.answered.values())
        if self.deadline is not None and self.deadline.when() is None and not waiting:
            self.deadline.reschedule(asyncio.get_running_loop().time() + self.remaining_s)

    # ending --------------------------------------------------------------------------
    def interrupted(self) -> str:
        """What to tell a user who pressed Ctrl-C: the turn goes on; how to act on it."""
        s, ts = self.session, command_name()
        lines = ["[yellow]stopped watching; the turn goes on[/] (Ctrl-C does not stop it)."]
        for prompt in self.prompts.values():
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
    """Send `command`, show its turn, exit 0 when it completed, 1 when not, 130 on Ctrl-C."""
    session = command["sessionId"]
    screen = SendScreen(session, quiet, sys.stdin.isatty() and not quiet, timeout)
    started = time.perf_counter()

    async def work(bus: Bus) -> TurnOutcome | Unfollowed:
        try:
            async with asyncio.timeout(timeout) as screen.deadline:
                return await send_and_wait(
                    bus,
                    command,
                    on_event=lambda event: screen.on_event(event, bus),
                    on_delta=screen.on_delta,
                    timeout=None,
                )
        except PermissionDenied as denied:
            if denied.action != "subscription":
                raise
            # a user that may send commands but not read the log (`client`): send it only
            return Unfollowed(await publish_command(bus, session, command), denied)
        finally:
            for task in list(screen.tasks):
                task.cancel()

    try:
        outcome = run_on_bus(settings, work)
    except TimeoutError:
        screen.end_tokens()
        err.print(
            f"\n[yellow]no terminal event within {timeout:g} s[/] (not counting time spent "
            f"waiting for your approval); the turn may still be running: "
            f"`turnstream tail {session}` follows it"
        )
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        console.print()
        err.print(screen.interrupted())
        raise typer.Exit(130) from None
    if isinstance(outcome, Unfollowed):
        console.print(f"[green]✔ sent[/] [dim]inbound seq {outcome.seq}[/]")
        err.print(f"[yellow]not followed:[/] {escape(str(outcome.why))}")
        return
    elapsed = (time.perf_counter() - started - screen.waited_s) * 1000
    screen.end_tokens()
    if outcome.completed:
        if quiet:
            console.print(outcome.reply or "")
        else:
            waited = f" (+ {screen.waited_s:.1f} s waiting for approval)" if screen.waited_s else ""
            console.print(
                f"[green]✔ completed[/] [dim]turn {outcome.turn_id} · {elapsed:.0f} ms{waited}[/]"
            )
        return
    failure = escape(f"[{outcome.failure_class}] {outcome.reason}")
    err.print(f"[red]✘ {outcome.status}[/] {failure}")
    if outcome.next_action:
        err.print(f"[yellow]next:[/] {escape(outcome.next_action)}")
    raise typer.Exit(1)
