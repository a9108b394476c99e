"""`turnstream tail`, `replay` and `status`: the log followed, a session rebuilt from it,
the turn-runner's live view (each imports what it uses when it runs)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from turnstream.cli.common import (
    DataDir,
    NatsUrl,
    console,
    err,
    prices_or_exit,
    run_on_bus,
    settings_of,
)

if TYPE_CHECKING:
    from turnstream.bus import Bus
    from turnstream.client import Replayed
    from turnstream.core.events import Event
    from turnstream.core.session import SessionState


def tail(
    session: Annotated[str | None, typer.Argument(help="Only this session.")] = None,
    history: Annotated[
        bool, typer.Option("--history", help="Print the stored events first.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Raw events, one per line.")] = False,
    nats_url: NatsUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Follow events as they are appended, one readable line each (Ctrl-C stops: exit 130)."""
    import contextlib

    from turnstream.cli.render import event_line
    from turnstream.core.events import decode

    def show(event: Event) -> None:
        if as_json:
            sys.stdout.write(event.model_dump_json(by_alias=True, exclude_none=True) + "\n")
            sys.stdout.flush()
        else:
            console.print(event_line(event))

    async def follow(bus: Bus) -> None:
        subject = bus.subjects.log_session(session) if session else bus.subjects.log_all

        async def on_msg(msg: Any) -> None:
            show(decode(msg.data))

        sub = await bus.nc.subscribe(subject, cb=on_msg)
        if history:  # by direct get: no consumer, which only the setup operator may create
            if session:
                for item in await bus.store.read_session(session):
                    show(item.event)
            for stream in bus.subjects.log_streams if not session else ():
                await bus.store.direct.read(
                    stream, bus.subjects.log_all, lambda _seq, _s, data: show(decode(data))
                )
        try:
            await watch_connection(bus)
        finally:
            with contextlib.suppress(Exception):  # the server may be away
                await sub.unsubscribe()

    run_on_bus(settings_of(nats_url, data_dir), follow)  # until Ctrl-C: exit 130


async def watch_connection(bus: Bus, every_s: float = 0.5) -> None:
    """Forever: one line when the connection to NATS drops (the client retries on its own,
    quietly) and one when it is back."""
    import asyncio

    connected = True
    while True:
        await asyncio.sleep(every_s)
        if bus.nc.is_closed:
            err.print("[red]connection to NATS closed[/]")
            raise typer.Exit(2)
        if connected and not bus.nc.is_connected:
            connected = False
            err.print("[yellow]lost the connection to NATS; retrying quietly (Ctrl-C stops)[/]")
        elif not connected and bus.nc.is_connected:
            connected = True
            err.print("[green]reconnected[/]; following again")


def iso_time(text: str) -> datetime:
    """An ISO 8601 time as `--at-time` takes it (`Z`, an offset, or no zone)."""
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(
            f"{text!r} is not an ISO 8601 time, e.g. 2026-11-25T14:03:00Z"
        ) from None


def replay(
    session: Annotated[str, typer.Argument(help="The session to rebuild.")],
    at: Annotated[
        int | None, typer.Option("--at", help="Stop after this log sequence (time travel).")
    ] = None,
    at_time: Annotated[
        datetime | None,
        typer.Option(
            "--at-time",
            parser=iso_time,
            metavar="TIME",
            help="Stop at this time (ISO 8601, UTC if no zone).",
        ),
    ] = None,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify", help="Compare with the turn-runner's live state; exit 1 if not equal."
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="The decider state as JSON.")] = False,
    nats_url: NatsUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Rebuild a session from the log (no model or tool is called): its turns with a
    stage timeline and durations, as of now or of a point in the past."""
    from turnstream.cli.session_view import print_session
    from turnstream.cli.workflow import print_run
    from turnstream.client import live_state, replay_session
    from turnstream.core.projection import build_view
    from turnstream.core.session import state_to_json

    cutoff = at_time.replace(tzinfo=at_time.tzinfo or UTC) if at_time else None

    async def work(bus: Bus) -> tuple[Replayed, bytes | None]:
        replayed = await replay_session(bus, session, at_seq=at, at_time=cutoff)
        return replayed, (await live_state(bus, session) if verify else None)

    settings = settings_of(nats_url, data_dir)
    (state, events, _, head), live = run_on_bus(settings, work)
    if head == 0:  # nothing in the log nor in the archive
        err.print(f"[red]no such session:[/] {session} (`turnstream sessions` lists them)")
        raise typer.Exit(1)
    if verify:
        assert live is not None
        _verify(state, live, len(events))
        return
    if as_json:
        sys.stdout.write(state_to_json(state).decode() + "\n")
        return
    if not events:
        err.print(f"[yellow]session {session} has no events at that point[/] (it has later ones)")
        raise typer.Exit(1)
    print_session(console, build_view(session, events), events, prices_or_exit(settings))
    if state.workflow is not None:
        print_run(console, state.workflow)


def _verify(state: SessionState, live: bytes, events: int) -> None:
    """`replay --verify`: exit 1 unless the state rebuilt from the log is the live one."""
    from turnstream.core.session import state_from_json, state_to_json

    if b'"error"' in live[:20]:
        err.print(f"[red]error:[/] the turn-runner could not answer: {live.decode()}")
        raise typer.Exit(2)
    if state_from_json(live) != state:
        err.print("[red]✘ the state rebuilt from the log differs from the live state[/]")
        err.print(f"log:  {state_to_json(state).decode()}")
        err.print(f"live: {live.decode()}")
        raise typer.Exit(1)
    console.print(f"[green]✔ rebuilt state equals the live state[/] ({events} events)")


def status(
    session: Annotated[
        str | None,
        typer.Argument(help="Session to ask the turn-runner about (none: the log's storage)."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="The turn-runner's state as JSON (as the API has it).")
    ] = False,
    nats_url: NatsUrl = None,
    data_dir: DataDir = None,
) -> None:
    """The turn-runner's live view of a session: its active turn, queue and history.

    Exits 1 for a session with no events (like `replay`). With no session: how full each
    stream is against its limit, and whether appends are refused (exits 1 if so)."""
    import orjson

    if session is None:
        from turnstream.cli.storage import show_storage

        if show_storage(settings_of(nats_url, data_dir), as_json):
            raise typer.Exit(1)
        return

    from turnstream.cli.session_view import print_status
    from turnstream.client import live_state

    async def work(bus: Bus) -> tuple[int, bytes]:
        return await bus.store.last_seq(session), await live_state(bus, session)

    last_seq, state = run_on_bus(settings_of(nats_url, data_dir), work)
    if last_seq == 0:
        err.print(f"[yellow]session {session} has no events[/] (`turnstream sessions` lists them)")
        raise typer.Exit(1)
    if as_json:
        sys.stdout.write(state.decode() + "\n")
        return
    print_status(console, orjson.loads(state), last_seq)
