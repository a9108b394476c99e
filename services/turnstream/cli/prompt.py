"""Approval prompts asked inline by `send` and `workflow attach`.

A prompt never blocks the reading of the log: it runs beside it, so an answer given
elsewhere (`turnstream approve` in another terminal, the console) ends it at once. Where
the answer comes from:

- a terminal (not `--quiet`): `? prompt [y/N]`, typed;
- a pipe or a file (`echo y | turnstream send …`): one line of it per prompt; at its end
  (or from /dev/null, or with no stdin at all) nobody here can answer: the prompt says
  how to answer elsewhere and the command ends at once with `PROMPT_WAITING` (the turn
  waits for the answer, up to the prompt's deadline);
- a terminal with `--quiet`: nothing is asked; the prompt says how to answer elsewhere and
  waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import termios
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from rich.markup import escape

from turnstream.cli.common import command_name, console
from turnstream.client import answer_command, publish_command
from turnstream.core.events import (
    Event,
    InteractionRequested,
    ToolCallApproved,
    ToolCallDenied,
)

if TYPE_CHECKING:
    from rich.console import Console

    from turnstream.bus import Bus

Source = Literal["terminal", "piped", "elsewhere", "nobody"]
PROMPT_WAITING = 4
"""The exit status of `send` and `workflow attach` that end at a prompt nobody here can
answer (no terminal, nothing more on stdin)."""
PIPE_QUIET_S = 0.5
"""How long a piped stdin may stay silent at a prompt before the prompt says what it waits
for (a file or /dev/null answers at once; an open pipe may never)."""


def answer_source(quiet: bool) -> Source:
    """Where answers come from: the terminal, the piped stdin, or only from elsewhere."""
    if sys.stdin is None or sys.stdin.closed:
        return "nobody"
    if sys.stdin.isatty():
        return "elsewhere" if quiet else "terminal"
    return "piped"


class Lines:
    """stdin's lines, read without a thread (so waiting can be cancelled) and without
    Python's buffer (which would hide a second piped answer from the event loop)."""

    def __init__(self) -> None:
        self.buffer = b""
        self.ended = False

    def _take(self) -> str | None:
        if b"\n" in self.buffer:
            line, _, self.buffer = self.buffer.partition(b"\n")
            return line.decode(errors="replace") + "\n"
        if self.ended:
            line, self.buffer = self.buffer, b""
            return line.decode(errors="replace")
        return None

    async def read(self) -> str:
        """The next line ("" at the end of input; no newline: the input ended in it)."""
        fd = sys.stdin.fileno()
        while (line := self._take()) is None:
            try:
                await self._readable(fd)
            except PermissionError:  # a regular file or /dev/null: reading never blocks
                pass
            chunk = os.read(fd, 4096)
            self.ended = not chunk
            self.buffer += chunk
        return line

    @staticmethod
    async def _readable(fd: int) -> None:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()

        def on_ready() -> None:
            if not ready.done():
                ready.set_result(None)

        loop.add_reader(fd, on_ready)
        try:
            await ready
        finally:
            loop.remove_reader(fd)


def forget_typed_input() -> None:
    """Drop what the user half-typed at a prompt that was answered elsewhere (else the
    shell would run it after we exit)."""
    with contextlib.suppress(termios.error, OSError, ValueError):
        termios.tcflush(sys.stdin.fileno(), termios.TCIFLUSH)


@dataclass
class Deadline:
    """A command's `--timeout` (`asyncio.timeout`'s, while inside it), paused while a
    person is asked: their time is not the turn's."""

    timeout: asyncio.Timeout | None = None
    remaining_s: float = 0.0
    """What was left when a prompt paused it."""

    def paused(self, waiting: bool) -> None:
        """`Prompts.on_wait`: stop the clock while a prompt is open, start it again after."""
        if self.timeout is None:
            return
        now, when = asyncio.get_running_loop().time(), self.timeout.when()
        if waiting and when is not None:
            self.remaining_s = max(0.0, when - now)
            self.timeout.reschedule(None)
        elif not waiting and when is None:
            self.timeout.reschedule(now + self.remaining_s)


@dataclass
class Prompts:
    """The open approval prompts of what a command follows, asked as `source` allows."""

    session: str
    source: Source
    out: Console = console
    """Where how to answer elsewhere is said (stderr under `--quiet`: stdout is the reply)."""
    on_wait: Callable[[bool], None] = lambda waiting: None
    """Told True when a person is asked, False when no prompt is open any more."""
    open: dict[str, InteractionRequested] = field(default_factory=dict)
    """Open prompts, by invocation id."""
    answered: dict[str, asyncio.Future[str]] = field(default_factory=dict)
    """Invocation id → how it was answered, once the log says so."""
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    lines: Lines = field(default_factory=Lines)
    one_at_a_time: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Two calls of one round ask one after the other (one line of input each)."""
    waited_s: float = 0.0
    """Time spent waiting for a person's answer."""
    unanswered: asyncio.Future[InteractionRequested] | None = None
    """Set to the first prompt nobody here can answer (`stuck`)."""

    def stuck(self) -> asyncio.Future[InteractionRequested]:
        """Done once a prompt is open that nobody here can answer: the command ends."""
        if self.unanswered is None:
            self.unanswered = asyncio.get_running_loop().create_future()
        return self.unanswered

    def see(self, event: Event, bus: Bus) -> None:
        """Act on a prompt or a verdict in the log."""
        if isinstance(event, InteractionRequested):
            self.open[event.data.invocation_id] = event
            task = asyncio.ensure_future(self.ask(bus, event))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        elif isinstance(event, ToolCallApproved | ToolCallDenied):
            invocation = event.data.invocation_id
            self.open.pop(invocation, None)
            verdict = "approved" if isinstance(event, ToolCallApproved) else "denied"
            by = event.data.answered_by
            future = self.verdict(invocation)
            if not future.done():
                future.set_result(f"{verdict} by {by.kind}:{by.id}" if by else verdict)

    def verdict(self, invocation: str) -> asyncio.Future[str]:
        if invocation not in self.answered:
            self.answered[invocation] = asyncio.get_running_loop().create_future()
        return self.answered[invocation]

    @property
    def waiting(self) -> bool:
        return any(not f.done() for f in self.answered.values())

    async def close(self) -> None:
        """Stop asking (the command ends): every prompt's task ended, none left behind."""
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def ask(self, bus: Bus, prompt: InteractionRequested) -> None:
        data = prompt.data
        elsewhere = self.verdict(data.invocation_id)
        if elsewhere.done():  # answered before we could even ask
            return
        asked_at = time.perf_counter()
        self.on_wait(True)
        try:
            async with self.one_at_a_time:
                if elsewhere.done():  # answered elsewhere while another prompt was asked
                    return
                typed = await self._typed(prompt, elsewhere)
            if typed is None:
                return
            decision = "approve" if typed.strip().lower() in ("y", "yes") else "deny"
            command = answer_command(self.session, data.interaction_id, decision)
            await publish_command(bus, self.session, command)
            await elsewhere  # the approval service's verdict, before the turn goes on
        finally:
            self.waited_s += time.perf_counter() - asked_at
            if not self.waiting:
                self.on_wait(False)

    async def _typed(
        self, prompt: InteractionRequested, elsewhere: asyncio.Future[str]
    ) -> str | None:
        """The answer read here, or None when it came from elsewhere (or nobody here can
        give it: `stuck`)."""
        text, interaction = prompt.data.prompt, prompt.data.interaction_id
        if self.source in ("terminal", "piped"):
            if self.source == "terminal":
                console.print(f"? {escape(text)} \\[y/N] ", end="")
            reading = asyncio.ensure_future(self.lines.read())
            either = {reading, elsewhere}
            done, _ = await asyncio.wait(
                either,
                timeout=PIPE_QUIET_S if self.source == "piped" else None,
                return_when=asyncio.FIRST_COMPLETED,
            )
            if not done:  # a pipe with nothing in it yet: say what it waits for
                ts = command_name()
                self.out.print(
                    f"[yellow]? {escape(text)}[/] waiting for y or n on stdin", soft_wrap=True
                )
                self.out.print(f"  or answer with: {ts} approve|deny {interaction}", soft_wrap=True)
                done, _ = await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if reading in done:
                line = reading.result()
                if self.source == "piped" and line:
                    console.print(f"? {escape(text)} {escape(line.strip())} [dim](from stdin)[/]")
                elif self.source == "terminal" and not line.endswith("\n"):
                    console.print()  # Ctrl-D: the answer is the default, no
                if line or self.source == "terminal":
                    return line
                self.source = "nobody"  # the piped input ended: nobody here can answer
            else:
                reading.cancel()
                if self.source == "terminal":
                    forget_typed_input()
                    console.print()
                console.print(f"[dim]answered elsewhere: {elsewhere.result()}[/]")
                return None
        ts, out = command_name(), self.out
        out.print(f"[yellow]? approval needed:[/] {escape(text)}")
        out.print(f"  answer with: {ts} approve {interaction}", soft_wrap=True)
        out.print(f"          or: {ts} deny {interaction}", soft_wrap=True)
        if self.source == "nobody":
            out.print(
                f"  no terminal here and nothing (more) on stdin to answer it; the turn waits "
                f"(denied at {prompt.data.deadline:%H:%M:%S} UTC if nobody answers)",
                soft_wrap=True,
            )
            stuck = self.stuck()
            if not stuck.done():
                stuck.set_result(prompt)
            return None
        out.print(f"[dim]answered: {await elsewhere}[/]")
        return None
