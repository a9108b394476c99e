"""What every `turnstream` command module shares: consoles, options, settings, a bus."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:  # imported where used: `turnstream --help` starts without them
    from turnstream.bus import Bus
    from turnstream.bus.errors import JetStreamError
    from turnstream.core.costs import PriceTable
    from turnstream.settings import Settings

T = TypeVar("T")
console = Console(highlight=False)
err = Console(stderr=True, highlight=False, soft_wrap=True)
"""Errors are not wrapped: a path, a hash or a command in them stays whole."""

PLAIN_HELP = None
"""Every `typer.Typer`'s `rich_markup_mode`: help and usage errors as plain text, since
typer's rich formatting imports rich.markdown, rich.syntax and more before its first line
(`bench/cli_start.py --importtime`), past what a start may take."""

NatsUrl = Annotated[
    str | None, typer.Option("--nats-url", help="NATS server (default: the one `up` started).")
]
DataDir = Annotated[
    Path | None, typer.Option("--data-dir", help="Data directory (TURNSTREAM_DATA_DIR).")
]


def require_session_id(session: str) -> None:
    """Exit 2 with the rule when `session` cannot be a session id."""
    from turnstream.core.subjects import is_reserved_session, is_session_id

    if not is_session_id(session):
        err.print(f"[red]error:[/] session id {session!r} must be 1-128 of [A-Za-z0-9_:-]")
        raise typer.Exit(2)
    if is_reserved_session(session):
        err.print(f"[red]error:[/] session id {session!r} is reserved (unroutable input)")
        raise typer.Exit(2)


def require_known_agent(agent: str, folder: Path) -> None:
    """Exit 2 naming the profiles when `folder` has profiles and none is `agent` (sent, a
    typo would be recorded as the session's failed first turn)."""
    from turnstream.agents import load_all

    profiles, _ = load_all(folder) if folder.is_dir() else ({}, [])
    if profiles and agent not in profiles:
        known = ", ".join(sorted(profiles))
        err.print(
            f"[red]error:[/] no agent {agent!r} in {folder} (it has: {known}); "
            "`turnstream agents` lists them; nothing was sent"
        )
        raise typer.Exit(2)


def settings_of(nats_url: str | None = None, data_dir: Path | None = None, **more: Any) -> Settings:
    """The settings, with what the command line gave overriding env and file."""
    from turnstream.settings import Settings

    overrides: dict[str, Any] = {k: v for k, v in more.items() if v is not None}
    if nats_url:
        overrides["nats_url"] = nats_url
    if data_dir:
        overrides["data_dir"] = data_dir
    return Settings(**overrides)


async def _close(bus: Bus) -> None:
    """Drain and close; while the server is away (Ctrl-C during a reconnect) draining
    cannot work, so just close."""
    try:
        await bus.close()
    except Exception:
        with contextlib.suppress(Exception):
            await bus.nc.close()


class Interrupted(typer.Exit):
    """Ctrl-C: the command ends quietly with exit 130 (a command may say more first)."""

    def __init__(self) -> None:
        super().__init__(130)


def run_on_bus(
    settings: Settings, work: Callable[[Bus], Awaitable[T]], *, stop_when_refused: bool = True
) -> T:
    """Connect, run `work`, close; a connection problem exits 2 with its message, Ctrl-C
    exits 130 (`Interrupted`) without a traceback.

    The first publish or subscription the server refuses this NATS user ends `work` at
    once and exits 2 naming the user, the subject and the role that may (a refused
    JetStream request would otherwise look like a service that does not answer);
    `stop_when_refused=False` leaves a refusal to `work` (`send` as a user that may send
    but not read the log)."""
    from turnstream.bus.errors import BusTimeout, JetStreamError, NoResponders
    from turnstream.bus.permissions import PermissionDenied
    from turnstream.cli.roles import explain
    from turnstream.runtime import connect_client

    async def main() -> T:
        bus = await connect_client(settings, "cli")
        try:
            return await _work_until_refused(bus, work, stop_when_refused)
        finally:
            await _close(bus)

    quiet_refusals()

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        raise Interrupted() from None
    except PermissionDenied as exc:  # before the timeout it would otherwise look like
        err.print(f"[red]error:[/] {escape(explain(exc))}")
        raise typer.Exit(2) from exc
    except (BusTimeout, NoResponders) as exc:
        # a request to a service (approval, turn-runner) that is down or busy
        err.print(
            f"[red]error:[/] no answer from the service ({escape(str(exc))}); "
            "is `turnstream up` running with every service?"
        )
        raise typer.Exit(2) from exc
    except (ConnectionError, RuntimeError, ValueError) as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    except JetStreamError as exc:
        _exit_if_log_full(exc)
        raise


def _exit_if_log_full(exc: JetStreamError) -> None:
    """Exit 2 saying so when JetStream refused a write because the log is full."""
    from turnstream.bus.full import is_log_full

    if is_log_full(exc):
        err.print(
            f"[red]error:[/] the log is full: JetStream refused it ({exc.description}); "
            "nothing was stored. See `turnstream status` and docs/operations.md, 'The log full'"
        )
        raise typer.Exit(2) from exc


async def _work_until_refused(
    bus: Bus, work: Callable[[Bus], Awaitable[T]], stop_when_refused: bool
) -> T:
    """`work(bus)`; with `stop_when_refused`, ended by the first refusal (raised as it), and a
    timeout that follows a refusal raised as that refusal."""
    from turnstream.bus.errors import BusTimeout, NoResponders
    from turnstream.bus.permissions import PermissionDenied

    refused: asyncio.Future[PermissionDenied] = asyncio.get_running_loop().create_future()

    def on_refusal(denied: PermissionDenied) -> None:
        if not refused.done():
            refused.set_result(denied)

    if stop_when_refused:
        bus.refusals.listeners.append(on_refusal)
    doing = asyncio.ensure_future(work(bus))
    try:
        waiting: set[asyncio.Future[Any]] = {doing, refused}
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if not doing.done():
            doing.cancel()
            with contextlib.suppress(BaseException):
                await doing
            raise refused.result()
        try:
            return doing.result()
        except (BusTimeout, TimeoutError, NoResponders):
            denied = bus.refusals.latest()  # refused, then timed out: say the refusal
            if denied is not None:
                raise denied from None
            raise
    finally:
        if not doing.done():  # Ctrl-C: the work ends (and cleans up) before the close
            doing.cancel()
            with contextlib.suppress(BaseException):
                await doing


async def unless_refused(bus: Bus, asking: Awaitable[T], *, otherwise: T) -> T:
    """What `asking` (a JetStream request) answers, or `otherwise` as soon as the server
    refuses this user a request meanwhile (a check a user may lack the right to make)."""
    refused: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def on_refusal(_denied: object) -> None:
        if not refused.done():
            refused.set_result(None)

    bus.refusals.listeners.append(on_refusal)
    doing = asyncio.ensure_future(asking)
    try:
        waiting: set[asyncio.Future[Any]] = {doing, refused}
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if doing.done():
            return doing.result()
        doing.cancel()
        with contextlib.suppress(BaseException):
            await doing
        return otherwise
    finally:
        bus.refusals.listeners.remove(on_refusal)


def quiet_refusals() -> None:
    """nats-py logs each failed reconnect with a traceback, and the bus each refusal as the
    server worded it: a command says either once itself (a refusal in its own words, with
    the role that may)."""
    logging.getLogger("nats").setLevel(logging.CRITICAL)
    logging.getLogger("turnstream.bus.connection").addFilter(_not_a_refusal)


def _not_a_refusal(record: logging.LogRecord) -> bool:
    return "permissions violation" not in record.getMessage().lower()


def command_name() -> str:
    """How this shell can run `turnstream` again: the bare name when PATH finds this very
    program (an activated venv), else the path it was started by (`.venv/bin/turnstream`)."""
    started = Path(sys.argv[0])
    found = shutil.which("turnstream")
    if started.name == "turnstream" and found and Path(found).resolve() == started.resolve():
        return "turnstream"
    if started.name == "turnstream":
        try:
            return str(started.resolve().relative_to(Path.cwd()))
        except ValueError:
            return str(started)
    return "turnstream"


def prices_or_exit(settings: Settings) -> PriceTable:
    """The price table (`TURNSTREAM_PRICES` over the defaults), or exit 2 naming the entry
    of the operator's file that is wrong."""
    from turnstream.prices import PriceFileError, load_prices

    try:
        return load_prices(settings.prices)
    except PriceFileError as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
