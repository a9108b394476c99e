"""`turnstream`: run the deployment, send messages, watch and replay the log."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from turnstream.cli.agents import register as register_agents
from turnstream.cli.approvals import register as register_approvals
from turnstream.cli.archive import register as register_archive
from turnstream.cli.audit import register as register_audit
from turnstream.cli.channels import register as register_channels
from turnstream.cli.common import (
    PLAIN_HELP,
    DataDir,
    NatsUrl,
    console,
    err,
    require_known_agent,
    require_session_id,
    run_on_bus,
    settings_of,
    unless_refused,
)
from turnstream.cli.workflow import workflow_app

# Each command imports what it uses when it runs: `turnstream --help`, `send --help` and
# `tail --help` start without the bus, the client or the core (bench/cli_start.py).
if TYPE_CHECKING:
    from turnstream.bus import Bus
    from turnstream.client import Replayed
    from turnstream.core.events import Event

app = typer.Typer(
    help="turnstream: LLM agent turns as event-sourced services on NATS JetStream.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=PLAIN_HELP,
)
schemas_app = typer.Typer(
    help="JSON Schema of the wire contract.", no_args_is_help=True, rich_markup_mode=PLAIN_HELP
)
app.add_typer(schemas_app, name="schemas")


@app.command()
def up(
    nats_url: NatsUrl = None,
    nats_port: Annotated[
        int | None, typer.Option("--nats-port", help="Port for the embedded server.")
    ] = None,
    data_dir: DataDir = None,
    provider: Annotated[
        str | None, typer.Option(help="scripted | anthropic | openai (TURNSTREAM_PROVIDER)")
    ] = None,
    script: Annotated[Path | None, typer.Option(help="Script for the scripted provider.")] = None,
    secure: Annotated[
        bool,
        typer.Option(
            "--secure",
            help="Load ops/accounts.conf and run each service as its own NATS user "
            "(passwords generated into DATA_DIR/dev-secrets.env).",
        ),
    ] = False,
) -> None:
    """Run an embedded nats-server and all services until Ctrl-C."""
    from turnstream.cli.up import run_up

    settings = settings_of(
        nats_url, data_dir, nats_port=nats_port, provider=provider, script=script
    )
    try:
        run_up(settings, console, secure=secure)
    except (RuntimeError, ValueError) as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc


@app.command()
def http(
    addr: Annotated[
        str | None, typer.Option("--addr", help="host:port to serve (TURNSTREAM_HTTP_ADDR).")
    ] = None,
    keys_file: Annotated[
        Path | None, typer.Option("--keys-file", help="API keys (TURNSTREAM_HTTP_KEYS_FILE).")
    ] = None,
    nats_url: NatsUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Serve the HTTP face (REST + SSE, OpenAPI at /docs) until Ctrl-C."""
    from turnstream.http.app import run

    run(settings_of(nats_url, data_dir, http_addr=addr, http_keys_file=keys_file))


@app.command()
def send(
    session: Annotated[str, typer.Argument(help="Session id: 1-128 of [A-Za-z0-9_:-].")],
    text: Annotated[
        str | None, typer.Argument(help="The message; - reads it from stdin (or use --file).")
    ] = None,
    file: Annotated[
        Path | None, typer.Option("--file", "-f", help="Read the message from this file.")
    ] = None,
    chat: Annotated[str | None, typer.Option(help="Chat id (default: the session id).")] = None,
    sender: Annotated[str, typer.Option(help="Sender as kind:id, e.g. agent:planner.")] = (
        "human:cli"
    ),
    key: Annotated[str | None, typer.Option(help="Idempotency key (default: new).")] = None,
    reply_to: Annotated[str | None, typer.Option(help="Session that wants the reply.")] = None,
    agent: Annotated[
        str | None,
        typer.Option(help="Agent profile the session talks to (`turnstream agents` lists them)."),
    ] = None,
    steer: Annotated[bool, typer.Option(help="Send as a steer command.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the turn.")] = 120.0,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet",
            "-q",
            help="Print only the reply. On a terminal no approval prompt is asked inline "
            "(answer with `turnstream approve`); a piped answer is still read.",
        ),
    ] = False,
    nats_url: NatsUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Send a message, stream its tokens and stages, print the reply.

    Exits 0 when the turn completed, 1 when it failed or was denied, 130 on Ctrl-C (which
    stops watching; the turn goes on); as a NATS user that may send but not read the log
    (`client`), 0 once the command is stored. A refused publish exits 2 and says so.
    Approval prompts are asked inline on a terminal, or answered by the lines of a piped
    stdin (`echo y | turnstream send …`); with no terminal and nothing (more) on stdin, it
    says how to answer (`turnstream approve`) and exits 4 at once, the turn waiting.
    """
    require_session_id(session)
    settings = settings_of(nats_url, data_dir)
    text = message_text(text, file)
    if not text.strip():
        err.print("[red]error:[/] the message is empty (or only spaces); nothing was sent")
        raise typer.Exit(2)
    if agent is not None:
        require_known_agent(agent, settings.agents)
    from turnstream.cli.send import run_send
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
    run_send(settings, command, quiet=quiet, timeout=timeout)


def message_text(text: str | None, file: Path | None) -> str:
    """The message: the argument, stdin (`-`) or a file (`--file`), exactly one of them."""
    if (text is None) == (file is None):
        err.print("[red]error:[/] give the message as an argument, `-` (stdin) or --file PATH")
        raise typer.Exit(2)
    if file is not None:
        try:
            return file.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            err.print(f"[red]error:[/] cannot read --file {file}: {exc}")
            raise typer.Exit(2) from exc
    return sys.stdin.read() if text == "-" else str(text)


@app.command()
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


@app.command()
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
    from turnstream.core.session import state_from_json, state_to_json

    cutoff = at_time.replace(tzinfo=at_time.tzinfo or UTC) if at_time else None

    async def work(bus: Bus) -> tuple[Replayed, bytes | None]:
        replayed = await replay_session(bus, session, at_seq=at, at_time=cutoff)
        return replayed, (await live_state(bus, session) if verify else None)

    (state, events, _, head), live = run_on_bus(settings_of(nats_url, data_dir), work)
    if head == 0:  # nothing in the log nor in the archive
        err.print(f"[red]no such session:[/] {session} (`turnstream sessions` lists them)")
        raise typer.Exit(1)
    if verify:
        assert live is not None
        if b'"error"' in live[:20]:
            err.print(f"[red]error:[/] the turn-runner could not answer: {live.decode()}")
            raise typer.Exit(2)
        if state_from_json(live) != state:
            err.print("[red]✘ the state rebuilt from the log differs from the live state[/]")
            err.print(f"log:  {state_to_json(state).decode()}")
            err.print(f"live: {live.decode()}")
            raise typer.Exit(1)
        console.print(f"[green]✔ rebuilt state equals the live state[/] ({len(events)} events)")
        return
    if as_json:
        sys.stdout.write(state_to_json(state).decode() + "\n")
        return
    if not events:
        err.print(f"[yellow]session {session} has no events at that point[/] (it has later ones)")
        raise typer.Exit(1)
    print_session(console, build_view(session, events), events)
    if state.workflow is not None:
        print_run(console, state.workflow)


@schemas_app.command("export")
def schemas_export(
    out: Annotated[Path, typer.Option(help="Directory to write to.")] = Path("schemas"),
    check: Annotated[
        bool, typer.Option("--check", help="Fail if the files differ instead of writing.")
    ] = False,
) -> None:
    """Write the JSON Schema of inbound commands and log events."""
    from turnstream.core.schemas import exported_schemas

    stale = []
    for name, content in exported_schemas().items():
        path = out / name
        if check:
            if not path.exists() or path.read_bytes() != content:
                stale.append(str(path))
            continue
        out.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        console.print(f"wrote {path}")
    if stale:
        err.print(f"[red]out of date:[/] {', '.join(stale)}; run `turnstream schemas export`")
        raise typer.Exit(1)


@app.command()
def streams(
    action: Annotated[
        str,
        typer.Argument(
            help="show: print the stream definitions (ops/streams.json is this output); "
            "apply: the setup step, create or update the streams and buckets (as operator); "
            "mapping: the subject mappings a partitioned log (TURNSTREAM_LOG_PARTITIONS > 1) "
            "needs in the account."
        ),
    ] = "show",
    replicas: Annotated[
        int | None, typer.Option(help="Stream replicas (apply: default TURNSTREAM_REPLICAS).")
    ] = None,
    accounts: Annotated[
        Path | None,
        typer.Option(
            help="mapping: print this accounts file (ops/accounts.conf) derived for the "
            "partitions instead: mappings in, every user's log rights per partition."
        ),
    ] = None,
    nats_url: NatsUrl = None,
    data_dir: DataDir = None,
) -> None:
    """The streams and buckets: print them, or create them (services only check they exist)."""
    import asyncio

    import orjson

    from turnstream.bus.streams import StreamLimits, describe
    from turnstream.runtime import apply_streams, stream_limits

    if action not in ("show", "apply", "mapping"):
        err.print(f"[red]error:[/] {action!r}: use `streams show`, `apply` or `mapping`")
        raise typer.Exit(2)
    if action == "mapping":
        from turnstream.bus.mapping import mapping_text

        sys.stdout.write(mapping_text(settings_of().subjects, accounts))
        return
    if action == "apply":
        from turnstream.bus.permissions import PermissionDenied
        from turnstream.cli.common import quiet_refusals
        from turnstream.cli.roles import explain

        settings = settings_of(nats_url, data_dir, replicas=replicas)
        quiet_refusals()
        try:
            asyncio.run(apply_streams(settings))
        except PermissionDenied as exc:
            err.print(f"[red]error:[/] {escape(explain(exc))}")
            raise typer.Exit(2) from exc
        except (ConnectionError, RuntimeError, ValueError, PermissionError) as exc:
            err.print(f"[red]error:[/] {exc}")
            raise typer.Exit(2) from exc
        except Exception as exc:  # nats-py's own
            err.print(f"[red]error:[/] the setup step failed: {type(exc).__name__}: {exc}")
            raise typer.Exit(2) from exc
        console.print(f"streams and buckets applied ({settings.replicas} replica(s))")
        return
    limits = stream_limits(settings_of())
    limits = StreamLimits(**{**limits.__dict__, "replicas": replicas or 1})
    options = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
    sys.stdout.write(
        orjson.dumps(describe(settings_of().subjects, limits), option=options).decode()
    )
    sys.stdout.write("\n")


@app.command()
def interrupt(
    session: Annotated[str, typer.Argument(help="The session whose turn to stop.")],
    hard: Annotated[
        bool, typer.Option("--hard", help="Stop at once (default: graceful, with a summary).")
    ] = False,
    nats_url: NatsUrl = None,
    data_dir: DataDir = None,
) -> None:
    """Interrupt the running turn of a session."""
    import uuid_utils

    from turnstream.client import publish_command

    require_session_id(session)
    mode = "hard" if hard else "graceful"
    command = {
        "type": "interrupt",
        "sessionId": session,
        "chatId": session,
        "sender": {"kind": "human", "id": "cli"},
        "idempotencyKey": str(uuid_utils.uuid7()),
        "mode": mode,
    }

    async def work(bus: Bus) -> bool:
        # a user that may interrupt but not read the log (a tenant's) sends unchecked
        exists = await unless_refused(bus, bus.store.last_seq(session), otherwise=1) > 0
        if exists:
            await publish_command(bus, session, command)
        return exists

    if not run_on_bus(settings_of(nats_url, data_dir), work, stop_when_refused=False):
        err.print(
            f"[red]no such session:[/] {session} (it has no events; `turnstream sessions` "
            "lists them); nothing was sent"
        )
        raise typer.Exit(1)
    console.print(f"sent a {mode} interrupt to {session}")


@app.command()
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


app.add_typer(workflow_app, name="workflow")
register_approvals(app)
register_audit(app)
register_agents(app)
register_channels(app)
register_archive(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
